// Bundles the <live-count> widget into one classic script, dist/livecount.js, and enforces the
// size budget. Types are not checked here: the root `tsc -b` checks src through tsconfig.json and
// emits declarations to dist/types.
import { build } from "esbuild";
import { mkdirSync, writeFileSync } from "node:fs";
import { argv, exit } from "node:process";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

/** The bundle must stay at or under 2 KB gzipped (brief: "Widget <= 2 KB gzipped"). */
export const GZIP_BUDGET_BYTES = 2048;

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

/**
 * Builds the bundle in memory.
 * @returns {Promise<{ code: string; rawBytes: number; gzipBytes: number }>}
 */
export async function bundle() {
  const result = await build({
    entryPoints: [here("src/livecount.ts")],
    bundle: true,
    // A classic script: no import/export, nothing leaks into the page's globals.
    format: "iife",
    minify: true,
    target: "es2019",
    sourcemap: false,
    legalComments: "none",
    write: false,
    logLevel: "silent",
  });
  const code = result.outputFiles[0].text;
  return {
    code,
    rawBytes: Buffer.byteLength(code),
    gzipBytes: gzipSync(code, { level: 9 }).length,
  };
}

if (argv[1] === fileURLToPath(import.meta.url)) {
  const { code, rawBytes, gzipBytes } = await bundle();
  mkdirSync(here("dist"), { recursive: true });
  writeFileSync(here("dist/livecount.js"), code);
  console.log(
    `widget: dist/livecount.js ${rawBytes} B raw, ${gzipBytes} B gzip (budget ${GZIP_BUDGET_BYTES} B)`,
  );
  if (gzipBytes > GZIP_BUDGET_BYTES) {
    console.error(`widget: over budget by ${gzipBytes - GZIP_BUDGET_BYTES} B gzip`);
    exit(1);
  }
}
