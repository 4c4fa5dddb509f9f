/** The bundle must stay at or under 2 KB gzipped. */
export declare const GZIP_BUDGET_BYTES: number;

/** Builds dist/livecount.js in memory: the minified IIFE and its raw and gzipped sizes in bytes. */
export declare function bundle(): Promise<{ code: string; rawBytes: number; gzipBytes: number }>;
