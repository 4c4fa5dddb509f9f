/**
 * What `npm start` tells its operator at start about what it cannot keep: counters in memory die
 * with the process, and keys it generated are for development only.
 */
import { MEMORY_STORE_WARNING } from "@livecount/counter";
import { describe, expect, test } from "vitest";
import { WARN, logLines } from "../../../packages/cluster/test/log_lines.js";
import { startStandalone } from "../src/index.js";

describe("standalone - start-up warnings", () => {
  test("on the in-memory store it says counters are lost when the process exits", async () => {
    const { logger, lines } = logLines();
    const app = await startStandalone({
      env: { LIVECOUNT_PORT: "0", LIVECOUNT_HOST: "127.0.0.1", LIVECOUNT_DEMO: "0" },
      logger,
    });
    try {
      const warnings = lines.filter((l) => l.level === WARN).map((l) => l.msg);
      expect(warnings).toContain(MEMORY_STORE_WARNING);
      expect(MEMORY_STORE_WARNING).toMatch(/lost when it exits; set LIVECOUNT_REDIS_URL/);
      // The generated keys are printed, so the console and the API can be tried at once.
      expect(warnings.some((m) => m.startsWith("no LIVECOUNT_ADMIN_KEY set"))).toBe(true);
      expect(warnings.some((m) => m.startsWith("no LIVECOUNT_PUBLISHER_KEYS set"))).toBe(true);
    } finally {
      await app.close();
    }
  });
});
