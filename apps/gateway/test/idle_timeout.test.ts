import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually, within } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";
import { SilentSocket } from "../../../test/support/raw_socket.js";

/** The smallest idle timeout the gateway accepts; uWS checks timeouts in 4 s steps. */
const IDLE_TIMEOUT_S = 8;
const UWS_TIMEOUT_STEP_MS = 4000;
const GRACE_MS = 300;
const MARGIN_MS = 2000;
const DEADLINE_MS = IDLE_TIMEOUT_S * 1000 + UWS_TIMEOUT_STEP_MS + GRACE_MS + MARGIN_MS;

describe("gateway - idle timeout", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_IDLE_TIMEOUT_S: String(IDLE_TIMEOUT_S),
      LIVECOUNT_GRACE_MS: String(GRACE_MS),
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test(
    "gateway - drops a silent socket after the idle timeout while a live client stays counted",
    async () => {
      const page = "idle";
      const watcher = await platform.watcher(page);
      const live = await platform.connect();
      live.join(page, "live");
      await watcher.waitForViewers(page, 1);

      // One client speaks WebSocket by hand and goes silent after joining: it never answers a ping.
      const raw = await SilentSocket.open("127.0.0.1", platform.app.port);
      raw.sendText(JSON.stringify({ type: "join", page, viewer: "silent-raw" }));
      // The other is a real `ws` client whose process stops reading: its TCP socket is paused.
      const paused = await platform.connect();
      paused.join(page, "silent-paused");
      await watcher.waitForViewers(page, 3);
      paused.ws.pause();
      const silentSince = Date.now();
      const from = watcher.counts(page).length - 1;

      await eventually(() => expect(watcher.lastCount(page)?.viewers).toBe(1), {
        timeoutMs: DEADLINE_MS,
        intervalMs: 100,
      });
      const droppedAfter = Date.now() - silentSince;
      // Not dropped for the silence alone before the idle timeout...
      expect(droppedAfter).toBeGreaterThanOrEqual(IDLE_TIMEOUT_S * 1000 - UWS_TIMEOUT_STEP_MS);
      // ...and the server closed the raw socket's connection.
      await within(raw.ended, MARGIN_MS, "the server's close of the silent raw socket");
      // The watcher and the live client answered pings all along: still open, still counted.
      expect(
        watcher
          .viewerHistory(page)
          .slice(from)
          .every((v) => v >= 1 && v <= 3),
      ).toBe(true);
      await live.ping();
      await watcher.ping();
      await platform.waitForViewers(page, 1);
      raw.destroy();
    },
    DEADLINE_MS + 10_000,
  );
});
