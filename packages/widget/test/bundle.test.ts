import { describe, expect, it } from "vitest";
import { bundle, GZIP_BUDGET_BYTES } from "../build.mjs";

describe("widget bundle", () => {
  it("stays within 2 KB gzipped", async () => {
    const { rawBytes, gzipBytes } = await bundle();
    console.log(`widget bundle: ${rawBytes} B raw, ${gzipBytes} B gzip`);
    expect(GZIP_BUDGET_BYTES).toBe(2048);
    expect(gzipBytes).toBeLessThanOrEqual(GZIP_BUDGET_BYTES);
  });

  it("is a classic script with no import or export statements", async () => {
    const { code } = await bundle();
    // Minified output puts statements after `;`, `}` or `{`, so look there and at the start.
    expect(code).not.toMatch(/(^|[;{}\s])(import|export)\s*[{*"'\w]/);
    expect(code).not.toMatch(/import\(|import\.meta/);
    // A classic script parses as a plain function body; module syntax would throw here.
    expect(() => new Function(code)).not.toThrow();
  });
});
