/**
 * One socket is at most one viewer of a page: a socket that joins as another viewer id, or leaves
 * and joins again as another id within the grace window, ends the previous id at once, while a
 * reload (a new socket, the same viewer id) still gets the grace window.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { sleep } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";
import type { TestClient } from "../../../test/support/ws_client.js";

/** The production default: long enough that a ghost left behind would show. */
const GRACE_MS = 3000;
/** How often a hostile socket switches viewer ids. */
const CYCLE_MS = 50;
/** How long it keeps cycling: well past the grace window would matter, bounded for the suite. */
const CYCLES = 40;

describe("gateway - one socket is at most one viewer", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_GRACE_MS: String(GRACE_MS) });
  });

  afterAll(async () => {
    await platform?.close();
  });

  /** Cycles `sockets` through fresh viewer ids every CYCLE_MS, `leave` first when asked. */
  async function cycle(page: string, sockets: TestClient[], leave: boolean): Promise<void> {
    for (let i = 0; i < CYCLES; i++) {
      sockets.forEach((s, n) => {
        if (leave && i > 0) s.leave(page);
        s.join(page, `ghost-${n}-${i}`);
      });
      await sleep(CYCLE_MS);
    }
    await Promise.all(sockets.map((s) => s.ping()));
  }

  test.each([
    ["joins as another id", "ghosts-rejoin", false],
    ["leaves and joins as another id", "ghosts-leave-rejoin", true],
  ] as const)(
    "gateway - a socket that %s every 50 ms never shows more than one viewer",
    async (_, page, leave) => {
      const watcher = await platform.watcher(page);
      const hostile = await platform.connect();
      await cycle(page, [hostile], leave);
      await watcher.waitForViewers(page, 1);
      expect(Math.max(...watcher.viewerHistory(page))).toBe(1);
      expect((await platform.counter(page)).viewers).toBe(1);
      expect(hostile.errors()).toEqual([]);
    },
  );

  test("gateway - a socket that leaves and joins as another id around the end of the grace window never shows two viewers", async () => {
    // The owner's grace starts when the leave reaches it and ends at its next sweep (every 250 ms):
    // a socket's memory of the id it left must outlast that, not just the gateway's own clock.
    const offsetsMs = [-100, -20, 0, 20, 100, 250, 500];
    await Promise.all(
      offsetsMs.map(async (offset, i) => {
        const page = `ghosts-edge-${i}`;
        const watcher = await platform.watcher(page);
        const socket = await platform.connect();
        socket.join(page, `edge-a-${i}`);
        await watcher.waitForViewers(page, 1);
        socket.leave(page);
        await sleep(GRACE_MS + offset);
        socket.join(page, `edge-b-${i}`);
        await sleep(1500);
        expect(Math.max(...watcher.viewerHistory(page)), `rejoined ${offset} ms after the grace`).toBe(1);
        await platform.waitForViewers(page, 1);
      }),
    );
  });

  test("gateway - 20 sockets cycling viewer ids never show more than 20 viewers", async () => {
    const page = "ghosts-twenty";
    const watcher = await platform.watcher(page);
    const hostile = await Promise.all(Array.from({ length: 20 }, () => platform.connect()));
    await cycle(page, hostile, false);
    await watcher.waitForViewers(page, 20);
    expect(Math.max(...watcher.viewerHistory(page))).toBeLessThanOrEqual(20);
    expect((await platform.counter(page)).viewers).toBe(20);
  });

  test("gateway - an id another socket still holds keeps counting when one socket moves on", async () => {
    const page = "ghosts-shared";
    const watcher = await platform.watcher(page);
    const first = await platform.connect();
    const second = await platform.connect();
    first.join(page, "bob");
    second.join(page, "bob");
    await watcher.waitForViewers(page, 1);
    second.join(page, "carol");
    await watcher.waitForViewers(page, 2);
    await second.ping();
    await sleep(100);
    expect(watcher.lastCount(page)?.viewers).toBe(2);
  });

  test("gateway - a reload (a new socket, the same viewer id) still gets the grace window, without a dip", async () => {
    const page = "ghosts-reload";
    const watcher = await platform.watcher(page);
    const before = await platform.connect();
    before.join(page, "ghost-0");
    before.join(page, "reloader");
    await watcher.waitForViewers(page, 1);
    await before.close();
    // A reload's gap, well inside the grace even when a loaded host stalls the new socket's join.
    await sleep(300);
    const after = await platform.connect();
    after.join(page, "reloader");
    await after.ping();
    await sleep(GRACE_MS);
    expect(watcher.viewerHistory(page).slice(1)).not.toContain(0);
    expect((await platform.counter(page)).viewers).toBe(1);
    // The socket's last id lingers after a close, as a reload needs; the one it moved away from did not.
    await after.close();
    expect((await platform.counter(page)).viewers).toBe(1);
    await watcher.waitForViewers(page, 0, GRACE_MS * 2);
  });
});
