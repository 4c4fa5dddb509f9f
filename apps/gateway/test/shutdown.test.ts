import { fileURLToPath } from "node:url";
import { describe, expect, test } from "vitest";
import { runScript } from "../../../test/support/bundled_script.js";
import { within } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";

const EXIT_DEADLINE_MS = 15_000;

describe("gateway - graceful shutdown", () => {
  test(
    "gateway - close() with open sockets and event streams resolves, closes every one and leaves nothing holding the process",
    async () => {
      const entry = fileURLToPath(new URL("./fixtures/close_with_open_sockets.ts", import.meta.url));
      const result = await runScript(entry, { timeoutMs: EXIT_DEADLINE_MS });
      const events = result.stdout
        .split("\n")
        .filter((line) => line.startsWith("{"))
        .map((line) => JSON.parse(line) as { event: string; codes?: number[]; ends?: string[] });
      const context = `stdout:\n${result.stdout}\nstderr:\n${result.stderr}`;
      expect(
        events.map((e) => e.event),
        context,
      ).toEqual(["counted", "closed", "sockets closed", "streams ended"]);
      expect(events[2]!.codes, context).toHaveLength(20);
      // Event streams end with their last chunk, not cut: clients know to reconnect elsewhere.
      expect(events[3]!.ends, context).toEqual(["end", "end"]);
      // The process exited on its own, with nothing left on its event loop.
      expect(result.timedOut, context).toBe(false);
      expect(result.code, context).toBe(0);
    },
    EXIT_DEADLINE_MS + 10_000,
  );

  test("gateway - after close() the port refuses connections and close() may be called again", async () => {
    const platform = await TestPlatform.start();
    const client = await platform.connect();
    client.join("closing", "v");
    await client.waitForViewers("closing", 1);
    const url = platform.url;
    await platform.app.close();
    const closed = await within(client.closed, 5000, "the client's close");
    // A close frame, not a dropped connection: the client knows to reconnect elsewhere.
    expect(closed.code).toBe(1001);
    await platform.app.close();
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  });
});
