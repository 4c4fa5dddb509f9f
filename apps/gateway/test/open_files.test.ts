import { describe, expect, test } from "vitest";
import { connectionsOverFileLimit, openFilesLimit } from "../src/open_files.js";

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max processes             95000                95000                processes
Max open files            1024                 20000                files
Max locked memory         8388608              8388608              bytes
`;

describe("gateway - open files", () => {
  test("gateway - the soft open-files limit is read from /proc/self/limits, unknown when it says unlimited or is missing", () => {
    expect(openFilesLimit(LIMITS)).toBe(1024);
    expect(openFilesLimit(LIMITS.replace("1024 ", "unlimited"))).toBeUndefined();
    expect(openFilesLimit("")).toBeUndefined();
    // This process's own, on Linux.
    if (process.platform === "linux") expect(openFilesLimit()).toBeGreaterThan(0);
  });

  test("gateway - LIVECOUNT_MAX_CONNECTIONS past the limit is named, with what it needs; at the limit it is not", () => {
    // 18,000 sockets, 32 listen sockets and 64 others: 18,096.
    expect(connectionsOverFileLimit(18_000, 32, 18_096)).toBeUndefined();
    expect(connectionsOverFileLimit(18_000, 32, 18_095)).toMatch(
      /^LIVECOUNT_MAX_CONNECTIONS \(18000\) needs about 18096 open files, above this process's limit of 18095/,
    );
    expect(connectionsOverFileLimit(18_000, 32, 1024)).toContain("ulimit -n");
    expect(connectionsOverFileLimit(100_000, 32, undefined)).toBeUndefined();
  });
});
