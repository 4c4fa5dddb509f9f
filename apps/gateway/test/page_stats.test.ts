import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";
import type { PageStatsBody } from "../src/page_reading.js";

/** `GET /v1/pages/{page}/stats` over real sockets on the embedded default. */
describe("gateway - page stats", () => {
  const GRACE_MS = 200;
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_GRACE_MS: String(GRACE_MS) });
  });

  afterAll(async () => {
    await platform?.close();
  });

  async function stats(page: string): Promise<PageStatsBody> {
    const res = await fetch(`${platform.url}/v1/pages/${encodeURIComponent(page)}/stats`);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    return (await res.json()) as PageStatsBody;
  }

  test("gateway - stats show viewers now, the peak after they leave, and each visitor once", async () => {
    const page = "stats-article";
    const aliceFront = await platform.connect();
    const aliceBack = await platform.connect();
    const bob = await platform.connect();
    const carol = await platform.connect();
    aliceFront.send({ type: "join", page, viewer: "alice" });
    aliceBack.send({ type: "join", page, viewer: "alice", active: false });
    bob.send({ type: "join", page, viewer: "bob" });
    carol.send({ type: "join", page, viewer: "carol", active: false });
    await platform.waitForViewers(page, 3);
    await eventually(async () =>
      expect(await stats(page)).toMatchObject({
        page,
        viewers: 3,
        active: 2,
        connections: 4,
        peak_viewers: { "1h": 3, "24h": 3 },
        unique_visitors: { "24h": 3 },
      }),
    );
    await bob.close();
    await carol.close();
    await platform.waitForViewers(page, 1, GRACE_MS + 5000);
    // Bob comes back: a visitor already counted today.
    const bobAgain = await platform.connect();
    bobAgain.send({ type: "join", page, viewer: "bob" });
    await platform.waitForViewers(page, 2);
    const after = await stats(page);
    expect(after).toMatchObject({
      viewers: 2,
      connections: 3,
      peak_viewers: { "1h": 3, "24h": 3 },
      unique_visitors: { "24h": 3 },
    });
    expect(after.updated_at).toBeGreaterThan(0);
  });

  test("gateway - a page nobody viewed has no stats but zeros; anonymous sockets are each one visitor", async () => {
    expect(await stats("stats-nobody")).toMatchObject({
      viewers: 0,
      peak_viewers: { "1h": 0, "24h": 0 },
      unique_visitors: { "24h": 0 },
    });
    const page = "stats-anonymous";
    const sockets = await Promise.all(Array.from({ length: 5 }, () => platform.connect()));
    for (const s of sockets) s.join(page);
    await platform.waitForViewers(page, 5);
    await eventually(async () =>
      expect(await stats(page)).toMatchObject({ peak_viewers: { "1h": 5 }, unique_visitors: { "24h": 5 } }),
    );
    // Leaving and joining again, or joining once more, a socket is still the visitor it was.
    for (const s of sockets) {
      s.send({ type: "leave", page });
      s.join(page);
      s.join(page);
    }
    // A named viewer joins after them: once it counts, the owner has had everything the sockets sent.
    const sentinel = await platform.connect();
    sentinel.join(page, "sentinel");
    await platform.waitForViewers(page, 6);
    await eventually(async () =>
      expect(await stats(page)).toMatchObject({ viewers: 6, connections: 6, unique_visitors: { "24h": 6 } }),
    );
  });
});

/** Unique visitors under a script that invents viewer ids: LIVECOUNT_NEW_VISITOR_RATE / _BURST. */
describe("gateway - new visitors per address", () => {
  const BURST = 5;
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_NEW_VISITOR_RATE: "1",
      LIVECOUNT_NEW_VISITOR_BURST: String(BURST),
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  async function uniqueVisitors(page: string): Promise<number> {
    const res = await fetch(`${platform.url}/v1/pages/${encodeURIComponent(page)}/stats`);
    return ((await res.json()) as PageStatsBody).unique_visitors["24h"];
  }

  test("gateway - fresh viewer ids past the address's budget still count as viewers, not as unique visitors; an id joining more pages spends once", async () => {
    const started = Date.now();
    // One socket cycling through 20 invented ids on one page: one viewer at a time, as ever. An id
    // that comes and goes within one of the gateway's presence batches never reaches the owner, so
    // each of the first BURST waits until the owner counted it (a loaded host can stretch any fixed
    // spacing past a batch); the rest are spaced past the batching, and may count or not.
    const cycling = await platform.connect();
    for (let i = 0; i < 20; i++) {
      cycling.send({ type: "join", page: "budget-a", viewer: `invented-${i}` });
      if (i < BURST) await eventually(async () => expect(await uniqueVisitors("budget-a")).toBe(i + 1));
      else await new Promise((resolve) => setTimeout(resolve, 30));
    }
    // Five sockets, five more ids, on another page: five viewers.
    const crowd = await Promise.all(Array.from({ length: 5 }, () => platform.connect()));
    for (const [i, s] of crowd.entries()) s.send({ type: "join", page: "budget-b", viewer: `crowd-${i}` });
    await platform.waitForViewers("budget-a", 1);
    await platform.waitForViewers("budget-b", 5);
    // The budget refills one a second: what the test took allows a few more.
    const refilled = Math.ceil((Date.now() - started) / 1000);
    await eventually(async () => {
      const a = await uniqueVisitors("budget-a");
      const b = await uniqueVisitors("budget-b");
      expect(a).toBeGreaterThanOrEqual(BURST);
      expect(a + b).toBeLessThanOrEqual(BURST + refilled);
    });
    const a = (await (await fetch(`${platform.url}/v1/pages/budget-a/stats`)).json()) as PageStatsBody;
    expect(a).toMatchObject({ viewers: 1, connections: 1 });

    // A browser's one id on three pages of one socket spends one token, once one is back.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const browser = await platform.connect();
    for (const page of ["budget-c", "budget-d", "budget-e"])
      browser.send({ type: "join", page, viewer: "reader" });
    for (const page of ["budget-c", "budget-d", "budget-e"]) {
      await platform.waitForViewers(page, 1);
      await eventually(async () => expect(await uniqueVisitors(page)).toBe(1));
    }
  });
});

/** An id the address could not count as a visitor is not one on the socket's other pages either. */
describe("gateway - new visitors per address, across a socket's pages", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_NEW_VISITOR_RATE: "1",
      LIVECOUNT_NEW_VISITOR_BURST: "2",
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  async function stats(page: string): Promise<PageStatsBody> {
    return (await (
      await fetch(`${platform.url}/v1/pages/${encodeURIComponent(page)}/stats`)
    ).json()) as PageStatsBody;
  }

  test("gateway - an id past the budget on one page does not become a visitor by joining another page of its socket", async () => {
    const [a, b, script] = await Promise.all([platform.connect(), platform.connect(), platform.connect()]);
    // The address's two tokens, spent at once, and a fresh id past them: each pong follows its
    // join's admission, so the three come within a few round trips here, far inside the second a
    // token takes to come back (waiting for the owner's count between them could take longer on a
    // loaded machine, and the fresh id would count).
    a.send({ type: "join", page: "spent-1", viewer: "reader-a" });
    await a.ping();
    b.send({ type: "join", page: "spent-1", viewer: "reader-b" });
    await b.ping();
    script.send({ type: "join", page: "spent-2", viewer: "invented" });
    await platform.waitForViewers("spent-1", 2);
    await platform.waitForViewers("spent-2", 1);
    // Then the same id on the socket's other pages.
    for (const page of ["spent-3", "spent-4"]) script.send({ type: "join", page, viewer: "invented" });
    await platform.waitForViewers("spent-3", 1);
    await platform.waitForViewers("spent-4", 1);
    await eventually(async () => expect((await stats("spent-1")).unique_visitors["24h"]).toBe(2));
    for (const page of ["spent-2", "spent-3", "spent-4"])
      expect(await stats(page), page).toMatchObject({ viewers: 1, unique_visitors: { "24h": 0 } });
  });
});
