/**
 * Pages a gateway starts watching in one turn take their snapshots together: one `snapshots` request
 * per partition and MAX_SNAPSHOT_BATCH pages, each page's answer its own. Against an owner played on an
 * in-memory bus (to inject its answers): every page gets its first frame with its value, a page the
 * reply had no room for is asked for on its own at once, a page the owner could not serve is retried,
 * an owner of an earlier release gets each page on its own, and a page left in the turn it was
 * watched costs neither a subscription nor a request.
 */
import {
  MemoryBus,
  dcUpdatesSubject,
  nodeSubject,
  pageSubject,
  type BusHandler,
  type Subscription,
} from "@livecount/bus";
import { DcLiveness } from "@livecount/cluster";
import {
  MAX_SNAPSHOT_BATCH,
  decodeNodeRequest,
  encodeMessage,
  encodePageUpdate,
  type CountFrame,
  type NodeReply,
  type NodeRequest,
  type PageStateReply,
} from "@livecount/protocol";
import { HashRing, partitionOf } from "@livecount/ring";
import { silentLogger, systemClock } from "@livecount/runtime";
import { afterEach, describe, expect, test } from "vitest";
import { OwnerClient } from "../src/owner_client.js";
import { MAX_FRAME_SPACING_MS, PageViews, frameSpacingMs } from "../src/page_views.js";
import { eventually } from "../../../test/support/eventually.js";
import { soleOwnerMembership } from "./fixtures/sole_owner.js";

const DC = "dc1";
const OWNER = "owner-1";

/** A page's state at the owner: `likes` is the page's number in its name. */
const stateOf = (page: string): PageStateReply => ({
  type: "page_state",
  page,
  counters: { likes: { [DC]: { p: Number(page.slice(1)), n: 0 } } },
  ts: 1,
});

describe("gateway - page views", () => {
  const stops: Array<() => void | Promise<void>> = [];
  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop();
  });

  /** Page views whose only owner answers each request with `answer`; what it was asked, in order. */
  function setUp(
    answer: (request: NodeRequest) => NodeReply | Promise<NodeReply>,
    { pageFrameRate = 1_000_000 }: { pageFrameRate?: number } = {},
  ) {
    const bus = new MemoryBus({ clock: systemClock });
    stops.push(() => bus.close());
    const subscribed: string[] = [];
    const subscribe = bus.subscribe.bind(bus);
    bus.subscribe = (subject: string, handler: BusHandler, opts?: { queue?: string }): Subscription => {
      subscribed.push(subject);
      return subscribe(subject, handler, opts);
    };
    const membership = soleOwnerMembership(bus, DC, OWNER);
    stops.push(() => membership.stop());
    const asked: string[] = [];
    bus.serve(nodeSubject(DC, OWNER), async (data) => {
      const request = decodeNodeRequest(data);
      asked.push(request.type === "snapshots" ? `snapshots(${request.pages.length})` : request.type);
      return encodeMessage(await answer(request));
    });
    const liveness = new DcLiveness({
      bus,
      clock: systemClock,
      logger: silentLogger,
      dc: DC,
      leaseMs: 10_000,
      heartbeatMs: 1_000,
    });
    /** The latest frame of each page, and every frame with its flush's time. */
    const frames = new Map<string, CountFrame>();
    const sent: Array<{ readonly ts: number; readonly frame: CountFrame }> = [];
    let spaced = 0;
    const views = new PageViews({
      dc: DC,
      bus,
      owners: new OwnerClient(bus, membership, DC, 1_000),
      sink: {
        publish: (ts, published) =>
          published.forEach((frame) => {
            frames.set(frame.page, frame);
            sent.push({ ts, frame });
          }),
      },
      liveness,
      clock: systemClock,
      logger: silentLogger,
      partitions: 8,
      coalesceMs: 5,
      pageFrameRate,
      onSpaced: (pages) => (spaced += pages),
      retryMs: 20,
      maxRetryMs: 40,
    });
    stops.push(() => views.close());
    return { views, asked, frames, sent, subscribed, bus, spaced: () => spaced };
  }

  /** Resolves once every page of `pages` has had a frame showing its likes. */
  const framesOf = (frames: Map<string, CountFrame>, pages: readonly string[]): Promise<void> =>
    eventually(
      () => {
        const missing = pages.filter((p) => frames.get(p)?.counters.likes !== Number(p.slice(1)));
        if (missing.length > 0)
          throw new Error(`${missing.length} pages without their frame, e.g. ${missing[0]}`);
      },
      { timeoutMs: 5_000, intervalMs: 10 },
    );

  /** `n` pages of `partition` (of 8), from `p1` on: a page's number is its likes at the owner. */
  const pagesIn = (partition: number, n: number): string[] => {
    const found: string[] = [];
    for (let k = 1; found.length < n; k++) if (partitionOf(`p${k}`, 8) === partition) found.push(`p${k}`);
    return found;
  };

  test("views - pages first watched in one turn take one snapshots request per partition and MAX_SNAPSHOT_BATCH pages; a lone one a snapshot", async () => {
    const partitionsAsked: number[][] = [];
    const { views, asked, frames } = setUp((r) => {
      if (r.type === "snapshot") return stateOf(r.page);
      if (r.type !== "snapshots") return { type: "error", code: "internal", message: "unexpected" };
      partitionsAsked.push([...new Set(r.pages.map((page) => partitionOf(page, 8)))]);
      return { type: "page_states", replies: r.pages.map(stateOf) };
    });
    const [big, small, lone] = [pagesIn(0, MAX_SNAPSHOT_BATCH + 44), pagesIn(1, 20), pagesIn(2, 1)];
    const all = [...big, ...small, ...lone];
    // Watched twice in the turn: one view, one page in the request.
    for (const page of [...all, ...big.slice(0, 10)]) expect(views.watch(page).frame).toBeUndefined();
    await framesOf(frames, all);
    expect(asked).toEqual([`snapshots(${MAX_SNAPSHOT_BATCH})`, "snapshots(44)", "snapshots(20)", "snapshot"]);
    // Each request names one partition's pages: a lease wait there holds up no other partition.
    expect(partitionsAsked).toEqual([[0], [0], [1]]);
    // Loaded: another watcher of the page gets its frame at once.
    expect(views.watch(big[6]!).frame?.counters.likes).toBe(Number(big[6]!.slice(1)));
    const later = pagesIn(3, 1)[0]!;
    views.watch(later);
    await framesOf(frames, [later]);
    expect(asked.at(-1)).toBe("snapshot");
  });

  test("views - a partition whose owner is slow to answer holds up no other partition's pages", async () => {
    // Partition 0 waits until the test lets it go, as a partition the owner is still taking over
    // waits for its lease.
    let letGo = (): void => {};
    const held = new Promise<void>((ok) => (letGo = ok));
    const { views, frames } = setUp(async (r) => {
      if (r.type !== "snapshots") return { type: "error", code: "internal", message: "unexpected" };
      if (r.pages.some((page) => partitionOf(page, 8) === 0)) await held;
      return { type: "page_states", replies: r.pages.map(stateOf) };
    });
    const [slow, quick] = [pagesIn(0, 3), pagesIn(1, 3)];
    for (const page of [...slow, ...quick]) views.watch(page);
    await framesOf(frames, quick);
    expect(slow.filter((page) => frames.has(page))).toEqual([]);
    letGo();
    await framesOf(frames, slow);
  });

  test("views - a page the reply had no room for is asked for alone at once; one the owner could not serve is retried", async () => {
    let refusals = 0;
    const { views, asked, frames } = setUp((r) => {
      if (r.type === "snapshot") return stateOf(r.page);
      if (r.type !== "snapshots") return { type: "error", code: "internal", message: "unexpected" };
      return {
        type: "page_states",
        replies: r.pages.map((page, i) =>
          i === 0 && refusals++ === 0
            ? { type: "error", code: "unavailable", message: "partition 3 is not owned yet" }
            : i >= 3
              ? { type: "error", code: "payload_too_large", message: "past the reply's size" }
              : stateOf(page),
        ),
      };
    });
    const all = pagesIn(0, 5);
    for (const page of all) views.watch(page);
    await framesOf(frames, all);
    // The fourth and fifth alone at once; the first alone after its backoff.
    expect(asked).toEqual(["snapshots(5)", "snapshot", "snapshot", "snapshot"]);
  });

  test("views - an owner of an earlier release refuses the batch as unknown: each page goes on its own", async () => {
    const { views, asked, frames } = setUp((r) =>
      r.type === "snapshot"
        ? stateOf(r.page)
        : { type: "error", code: "bad_frame", message: 'unknown message type "snapshots"' },
    );
    const all = pagesIn(0, 4);
    for (const page of all) views.watch(page);
    await framesOf(frames, all);
    expect(asked).toEqual(["snapshots(4)", "snapshot", "snapshot", "snapshot", "snapshot"]);
  });

  test("views - a page left in the turn it was watched is neither subscribed nor asked for", async () => {
    const { views, asked, frames, subscribed } = setUp((r) =>
      r.type === "snapshots"
        ? { type: "page_states", replies: r.pages.map(stateOf) }
        : r.type === "snapshot"
          ? stateOf(r.page)
          : { type: "error", code: "internal", message: "unexpected" },
    );
    const before = subscribed.length;
    views.watch("p1");
    views.watch("p2");
    views.unwatch("p2");
    await framesOf(frames, ["p1"]);
    expect(asked).toEqual(["snapshot"]);
    const subjectOf = (page: string): string => pageSubject(page, partitionOf(page, 8));
    expect(subscribed.slice(before).filter((s) => s === subjectOf("p2"))).toEqual([]);
    expect(subscribed.slice(before).filter((s) => s === subjectOf("p1"))).toHaveLength(1);
    expect(views.size).toBe(1);
    expect(frames.has("p2")).toBe(false);
  });

  test("views - the pages a restarted counter node owns take fresh snapshots: updates it published before may have been lost; other owners' pages are not asked for", async () => {
    let extra = 0;
    const now = (page: string): PageStateReply => {
      const state = stateOf(page);
      return { ...state, counters: { likes: { [DC]: { p: Number(page.slice(1)) + extra, n: 0 } } } };
    };
    const { views, asked, frames } = setUp((r) =>
      r.type === "snapshots"
        ? { type: "page_states", replies: r.pages.map(now) }
        : r.type === "snapshot"
          ? now(r.page)
          : { type: "error", code: "internal", message: "unexpected" },
    );
    const pages = Array.from({ length: 8 }, (_, partition) => pagesIn(partition, 2)).flat();
    for (const page of pages) views.watch(page);
    await framesOf(frames, pages);
    // The owner counted 100 more likes on every page, and its updates never came.
    extra = 100;
    const ring = new HashRing(["owner-1", "owner-2"], { partitions: 8, vnodes: 64 });
    const restarted = pages.filter((page) => ring.ownerOf(partitionOf(page, 8)) === "owner-2");
    expect(restarted.length).toBeGreaterThan(0);
    expect(restarted.length).toBeLessThan(pages.length);
    const askedBefore = asked.length;
    views.resnapshotOwnedBy(ring, new Set(["owner-2"]));
    await eventually(
      () => {
        for (const page of restarted)
          expect(frames.get(page)?.counters.likes).toBe(Number(page.slice(1)) + 100);
      },
      { timeoutMs: 5_000, intervalMs: 10 },
    );
    // One request per partition of the restarted node; the other pages keep their values.
    const partitionsOfRestarted = new Set(restarted.map((page) => partitionOf(page, 8)));
    expect(asked.slice(askedBefore)).toEqual([...partitionsOfRestarted].map(() => "snapshots(2)"));
    for (const page of pages.filter((p) => !restarted.includes(p)))
      expect(frames.get(page)?.counters.likes).toBe(Number(page.slice(1)));
  });

  test("views - a node that began serving a partition says so on the DC's updates subject: that partition's watched pages take fresh snapshots, one request, and no other's", async () => {
    let extra = 0;
    const now = (page: string): PageStateReply => {
      const state = stateOf(page);
      return { ...state, counters: { likes: { [DC]: { p: Number(page.slice(1)) + extra, n: 0 } } } };
    };
    const { views, asked, frames, bus } = setUp((r) =>
      r.type === "snapshots"
        ? { type: "page_states", replies: r.pages.map(now) }
        : { type: "error", code: "internal", message: "unexpected" },
    );
    const pages = Array.from({ length: 8 }, (_, partition) => pagesIn(partition, 2)).flat();
    for (const page of pages) views.watch(page);
    await framesOf(frames, pages);
    // The earlier owner of partition 3 counted 100 more likes on its pages, and its updates never came.
    extra = 100;
    const askedBefore = asked.length;
    bus.publish(
      dcUpdatesSubject(DC, 3),
      encodeMessage({ type: "updates", partition: 3, pages: {}, ts: 1, taken: 2 }),
    );
    await eventually(
      () => {
        for (const page of pagesIn(3, 2))
          expect(frames.get(page)?.counters.likes).toBe(Number(page.slice(1)) + 100);
      },
      { timeoutMs: 5_000, intervalMs: 10 },
    );
    expect(asked.slice(askedBefore)).toEqual(["snapshots(2)"]);
    for (const page of pages.filter((p) => partitionOf(p, 8) !== 3))
      expect(frames.get(page)?.counters.likes).toBe(Number(page.slice(1)));
    // Updates without the notice re-take nothing.
    bus.publish(dcUpdatesSubject(DC, 3), encodeMessage({ type: "updates", partition: 3, pages: {}, ts: 2 }));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(asked.length).toBe(askedBefore + 1);
  });

  test("views - a bus closed before the turn ends leaves the turn's pages unwatched, without a throw", async () => {
    const { views, asked, bus } = setUp((r) =>
      r.type === "snapshots"
        ? { type: "page_states", replies: r.pages.map(stateOf) }
        : { type: "error", code: "internal", message: "unexpected" },
    );
    views.watch("p1");
    views.watch("p2");
    await bus.close();
    // The deferred start runs at the end of this turn; an exception there would fail the run.
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(asked).toEqual([]);
    // Left as they were watched: unwatching them has nothing to undo.
    views.unwatch("p1");
    views.unwatch("p2");
    expect(views.size).toBe(0);
  });

  test("views - a page watched by more sockets than its frame rate allows gets its frames spaced by watchers / rate; one watched lightly keeps the window; each ends on its last value", async () => {
    // 1,000 frames a second per page: 200 watchers here space a page's frames by 200 ms.
    const { views, frames, sent, bus, spaced } = setUp(
      (r) => {
        if (r.type === "snapshot") return stateOf(r.page);
        if (r.type === "snapshots") return { type: "page_states", replies: r.pages.map(stateOf) };
        return { type: "error", code: "internal", message: "unexpected" };
      },
      { pageFrameRate: 1_000 },
    );
    const [hot, quiet] = [pagesIn(4, 1)[0]!, pagesIn(5, 1)[0]!];
    for (let i = 0; i < 200; i++) views.watch(hot);
    views.watch(quiet);
    await framesOf(frames, [hot, quiet]);
    // Both pages change every 10 ms for a second.
    let likes = 1_000;
    let rounds = 0;
    const started = Date.now();
    while (Date.now() - started < 1_000) {
      likes++;
      rounds++;
      for (const page of [hot, quiet]) {
        const update = encodePageUpdate({
          type: "update",
          page,
          dc: DC,
          counters: new Map([["likes", { p: likes, n: 0 }]]),
          ts: Date.now(),
        });
        bus.publish(pageSubject(page, partitionOf(page, 8)), update);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const changedMs = Date.now() - started;
    await eventually(
      () =>
        expect([frames.get(hot)?.counters.likes, frames.get(quiet)?.counters.likes]).toEqual([likes, likes]),
      {
        timeoutMs: 2_000,
        intervalMs: 10,
      },
    );
    const timesOf = (page: string): number[] =>
      sent.filter((s) => s.frame.page === page && s.frame.counters.likes! > 1_000).map((s) => s.ts);
    const gaps = (ts: number[]): number[] => ts.slice(1).map((t, i) => t - ts[i]!);
    const [hotTimes, quietTimes] = [timesOf(hot), timesOf(quiet)];
    // 1 s of changes: about five frames of the hot page, each at least 200 ms after the one before
    // (fewer when a loaded host stalls the loop: two at least, a gap to measure).
    expect(Math.min(...gaps(hotTimes))).toBeGreaterThanOrEqual(200);
    expect(hotTimes.length).toBeGreaterThanOrEqual(2);
    expect(hotTimes.length).toBeLessThanOrEqual(Math.floor(changedMs / 200) + 2);
    // The quiet page went out for most of its changes (each at least 10 ms apart, its window 5 ms).
    expect(quietTimes.length).toBeGreaterThanOrEqual(rounds / 2);
    expect(spaced()).toBeGreaterThan(0);
  });

  test("views - frame spacing is the window, or watchers over the page's frame rate, at most a second", () => {
    expect(frameSpacingMs(1, 20_000, 50)).toBe(50);
    expect(frameSpacingMs(1_000, 20_000, 50)).toBe(50);
    expect(frameSpacingMs(2_000, 20_000, 50)).toBe(100);
    expect(frameSpacingMs(10_000, 20_000, 50)).toBe(500);
    expect(frameSpacingMs(50_000, 20_000, 50)).toBe(MAX_FRAME_SPACING_MS);
    expect(MAX_FRAME_SPACING_MS).toBe(1_000);
  });
});
