import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";

/**
 * Attention (`active`) and `connections` over real sockets: what count frames and HTTP reads say as
 * tabs join visible or hidden, change visibility, and close.
 */
describe("gateway - attention and connections", () => {
  /**
   * The default: a reload must come back within it, and a leave's frame of a lingering viewer lasts
   * that long. This file runs at nice 19 in npm test, where a stall outlasts 300 ms.
   */
  const GRACE_MS = 3000;
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_GRACE_MS: String(GRACE_MS) });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("gateway - a viewer is active while any of its tabs is visible; connections count every tab", async () => {
    const page = "attention-tabs";
    const watcher = await platform.watcher(page);
    const [aliceVisible, aliceHidden, bob] = await Promise.all([
      platform.connect(),
      platform.connect(),
      platform.connect({ encoding: "msgpack" }),
    ]);
    aliceVisible.send({ type: "join", page, viewer: "alice", active: true });
    aliceHidden.send({ type: "join", page, viewer: "alice", active: false });
    bob.join(page);
    await watcher.waitForCount(page, { viewers: 2, active: 2, connections: 3 });

    // Alice's visible tab goes to the background: only bob is looking.
    aliceVisible.send({ type: "active", page, active: false });
    await watcher.waitForCount(page, { viewers: 2, active: 1, connections: 3 });
    // Bob too (msgpack frames carry the same fields).
    bob.send({ type: "active", page, active: false });
    await watcher.waitForCount(page, { viewers: 2, active: 0, connections: 3 });
    expect(bob.lastCount(page)).toBeDefined();
    // Alice's other tab comes to the front.
    aliceHidden.send({ type: "active", page, active: true });
    await watcher.waitForCount(page, { viewers: 2, active: 1, connections: 3 });
    expect(await platform.counter(page)).toMatchObject({ viewers: 2, active: 1, connections: 3 });

    // Closing her visible tab leaves alice counted, hidden, on one connection.
    await aliceHidden.close();
    await watcher.waitForCount(page, { viewers: 2, active: 0, connections: 2 });
    await bob.waitForCount(page, { viewers: 2, active: 0, connections: 2 });
  });

  test("gateway - a reload keeps an active viewer active through the grace window; its connection comes back", async () => {
    const page = "attention-reload";
    const watcher = await platform.watcher(page);
    const tab = await platform.connect();
    tab.send({ type: "join", page, viewer: "carol" });
    await watcher.waitForCount(page, { viewers: 1, active: 1, connections: 1 });
    await tab.close();
    const again = await platform.connect();
    again.send({ type: "join", page, viewer: "carol", active: true });
    await watcher.waitForCount(page, { viewers: 1, active: 1, connections: 1 });
    await watcher.ping();
    // Neither the viewer nor its attention dipped; only the connection was gone meanwhile.
    const frames = watcher.counts(page).slice(1);
    expect(frames.every((f) => f.viewers === 1 && f.active === 1)).toBe(true);
  });

  test("gateway - a viewer who leaves takes its attention along once the grace is over", async () => {
    const page = "attention-leave";
    const watcher = await platform.watcher(page);
    const tab = await platform.connect();
    tab.send({ type: "join", page, viewer: "dave", active: true });
    await watcher.waitForCount(page, { viewers: 1, active: 1, connections: 1 });
    tab.leave(page);
    await watcher.waitForCount(page, { viewers: 1, active: 1, connections: 0 });
    await watcher.waitForCount(page, { viewers: 0, active: 0, connections: 0 }, GRACE_MS + 3000);
  });

  test("gateway - a join of a joined page as the same viewer only sets attention; active on a watched page changes nothing", async () => {
    const page = "attention-rejoin";
    const watcher = await platform.watcher(page);
    const tab = await platform.connect();
    tab.send({ type: "join", page, viewer: "erin", active: false });
    await watcher.waitForCount(page, { viewers: 1, active: 0, connections: 1 });
    tab.send({ type: "join", page, viewer: "erin", active: true });
    await watcher.waitForCount(page, { viewers: 1, active: 1, connections: 1 });
    // A watcher saying it is active is no viewer: nothing moves.
    watcher.send({ type: "active", page, active: true });
    watcher.send({ type: "active", page: "attention-never-joined", active: false });
    await watcher.ping();
    await tab.ping();
    expect(watcher.lastCount(page)).toMatchObject({ viewers: 1, active: 1, connections: 1 });
    expect(watcher.errors()).toEqual([]);
  });

  test("gateway - a malformed active field is a bad_frame and changes nothing", async () => {
    const page = "attention-bad";
    const watcher = await platform.watcher(page);
    const tab = await platform.connect();
    tab.send({ type: "join", page, viewer: "frank", active: "yes" });
    expect((await tab.nextError(0)).code).toBe("bad_frame");
    tab.send({ type: "join", page, viewer: "frank" });
    await watcher.waitForCount(page, { viewers: 1, active: 1, connections: 1 });
    const from = tab.received.length;
    tab.send({ type: "active", page });
    tab.send({ type: "active", page, active: 1 });
    expect((await tab.nextError(from)).code).toBe("bad_frame");
    expect((await tab.nextError(from + 1)).code).toBe("bad_frame");
    await tab.ping();
    expect(watcher.lastCount(page)).toMatchObject({ viewers: 1, active: 1, connections: 1 });
  });

  test("gateway - an active frame without a page sets every page the socket joined, in one frame", async () => {
    const pages = Array.from({ length: 40 }, (_, i) => `attention-many-${i}`);
    const tab = await platform.connect();
    for (const page of pages) tab.send({ type: "join", page, viewer: "gina" });
    tab.watch("attention-many-watched");
    await eventually(() => expect(pages.every((p) => tab.lastCount(p)?.active === 1)).toBe(true));
    // A tab hidden and shown many times: one frame each time, well within the frame budget.
    for (let i = 0; i < 10; i++) {
      tab.send({ type: "active", active: false });
      tab.send({ type: "active", active: true });
    }
    tab.send({ type: "active", active: false });
    await eventually(() => expect(pages.every((p) => tab.lastCount(p)?.active === 0)).toBe(true));
    expect(pages.every((p) => tab.lastCount(p)?.viewers === 1)).toBe(true);
    expect(tab.errors()).toEqual([]);
    tab.send({ type: "active", active: true });
    await eventually(() => expect(pages.every((p) => tab.lastCount(p)?.active === 1)).toBe(true));
    // The watched page counted nobody and still does.
    expect(tab.lastCount("attention-many-watched")).toMatchObject({ viewers: 0, active: 0, connections: 0 });
  });
});
