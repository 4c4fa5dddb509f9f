import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually, within } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";
import { SilentSocket } from "../../../test/support/raw_socket.js";

/** The smallest idle timeout the gateway accepts; uWS checks timeouts in 4 s steps. */
const IDLE_TIMEOUT_S = 8;
const UWS_TIMEOUT_STEP_MS = 4000;
const GRACE_MS = 300;
/** Stalls of a loaded host on top (this file runs at nice 19 in npm test): they add up over 12 s. */
const MARGIN_MS = 6000;
const DEADLINE_MS = IDLE_TIMEOUT_S * 1000 + UWS_TIMEOUT_STEP_MS + GRACE_MS + MARGIN_MS;
/**
 * uWS closes a connection that has not completed an HTTP request after 10 s (not configurable),
 * counted in its 4 s checks: three of them, so 8 to 12 s after the connection opened.
 */
const UWS_HTTP_CHECKS = Math.ceil(10_000 / UWS_TIMEOUT_STEP_MS);
const UWS_HTTP_EARLIEST_MS = (UWS_HTTP_CHECKS - 1) * UWS_TIMEOUT_STEP_MS;
const UWS_HTTP_LATEST_MS = UWS_HTTP_CHECKS * UWS_TIMEOUT_STEP_MS;

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

  test(
    "gateway - closes connections that never finish a request, also when their headers trickle in, while it keeps serving",
    async () => {
      // What holds a gateway's file descriptors before any per-address limit can apply (those count
      // from the upgrade on): connections that send nothing, and connections that send a header line
      // now and then and never the blank line that ends them.
      const silent = Array.from({ length: 20 }, () => openRaw(platform.app.port));
      const trickling = Array.from({ length: 20 }, () => openRaw(platform.app.port));
      await Promise.all([...silent, ...trickling].map((c) => c.connected));
      const openedAt = Date.now();
      const timers = trickling.map(({ socket }) => {
        socket.write("GET /ws HTTP/1.1\r\nHost: localhost\r\n");
        return setInterval(() => socket.write("X-Slow: 1\r\n"), 1_000);
      });
      try {
        // The gateway serves meanwhile.
        const res = await fetch(`http://127.0.0.1:${platform.app.port}/healthz`);
        expect(res.status).toBe(200);
        const closedAt = await Promise.all([...silent, ...trickling].map((c) => c.closed));
        const after = closedAt.map((t) => t - openedAt);
        // Trickled headers do not extend the wait: every one is closed within uWS's HTTP timeout.
        expect(Math.max(...after)).toBeLessThan(UWS_HTTP_LATEST_MS + MARGIN_MS);
        expect(Math.min(...after)).toBeGreaterThan(UWS_HTTP_EARLIEST_MS - 500);
      } finally {
        for (const t of timers) clearInterval(t);
        for (const { socket } of [...silent, ...trickling]) socket.destroy();
      }
    },
    UWS_HTTP_LATEST_MS + MARGIN_MS + 10_000,
  );
});

/** A plain TCP connection to the gateway: when it connected, and when the server closed it. */
function openRaw(port: number): { socket: Socket; connected: Promise<void>; closed: Promise<number> } {
  const socket = connect({ host: "127.0.0.1", port });
  socket.on("error", () => {});
  socket.resume();
  return {
    socket,
    connected: new Promise((resolve) => socket.once("connect", () => resolve())),
    closed: new Promise((resolve) => socket.once("close", () => resolve(Date.now()))),
  };
}
