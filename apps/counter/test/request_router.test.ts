import { nodeSubject } from "@livecount/bus";
import {
  CONNECTIONS_COUNTER,
  HOLD_DROPPED,
  MAX_SNAPSHOT_REPLY_BYTES,
  VIEWERS_COUNTER,
  holdCode,
  pageStateBytes,
  decodeNodeReply,
  decodeNodeRequest,
  encodeMessage,
  type NodeInfoReply,
  type NodeReply,
  type NodeRequest,
} from "@livecount/protocol";
import { HashRing, partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { CounterMetrics } from "../src/counter_metrics.js";
import { RequestRouter } from "../src/request_router.js";
import { DC, PARTITIONS, buildUnits, pageIn, type Units } from "./units.js";

const NODE_INFO: NodeInfoReply = {
  type: "node_info",
  node: "me",
  incarnation: "inc-1",
  ready: true,
  partitions: [
    [3, 7],
    [9, 1],
  ],
  // Not what the registry holds (0): the answer must carry the node's own count, from nodeInfo().
  actors: 5,
  dirty: 2,
  flushLagMs: 40,
  bootstrapped: 2,
  resyncing: { dc2: 1 },
  ts: 1_000,
};

describe("counter - request router", () => {
  let u: Units;
  let running = true;
  afterEach(async () => u.close());

  /** Node "me" owns what the ring gives it; node "other" (on the same bus) answers what it is sent. */
  async function setUp(
    opts: {
      otherHangs?: boolean;
      otherAnswers?: (request: NodeRequest) => NodeReply;
      /** Told of every wait for a lease the router starts. */
      onWait?: (partition: number) => void;
    } = {},
  ): Promise<{
    router: RequestRouter;
    mine: number;
    theirs: number;
    forwarded: NodeRequest[];
  }> {
    u = await buildUnits();
    running = true;
    const ring = new HashRing(["me", "other"], { partitions: PARTITIONS });
    const mine = ring.partitionsOf("me")[0]!;
    const theirs = ring.partitionsOf("other")[0]!;
    await u.acquire(mine);
    const forwarded: NodeRequest[] = [];
    u.bus.serve(nodeSubject(DC, "other"), (data) => {
      forwarded.push(decodeNodeRequest(data));
      if (opts.otherHangs === true) return new Promise<Uint8Array>(() => {});
      const request = forwarded.at(-1)!;
      return encodeMessage(
        opts.otherAnswers?.(request) ?? { type: "page_state", page: "x", counters: {}, ts: 1 },
      );
    });
    const router = new RequestRouter({
      dc: DC,
      nodeId: "me",
      partitions: PARTITIONS,
      forwardTimeoutMs: opts.otherHangs === true ? 50 : 1_000,
      ownershipWaitMs: 0,
      bus: u.bus,
      store: u.store,
      logger: silentLogger,
      metrics: new CounterMetrics(new Registry(), {
        partitionsOwned: () => 1,
        partitionsBootstrapped: () => 1,
      }),
      ring: () => ring,
      fenceOf: (p) => u.fences.get(p),
      whenHeld: async (p) => {
        opts.onWait?.(p);
        return u.fences.get(p);
      },
      servingFence: (p) => u.fences.get(p),
      registry: u.registry,
      intake: u.intake,
      writer: u.writer,
      isRunning: () => running,
      nodeInfo: () => ({ ...NODE_INFO, actors: u.registry.size }),
      purge: async (olderThanMs) => ({
        type: "purged",
        node: "me",
        before: 1_000_000 - olderThanMs,
        pages: 1,
        counters: 2,
        kept: 3,
        failed: 0,
        waiting: 4,
      }),
    });
    return { router, mine, theirs, forwarded };
  }

  async function ask(router: RequestRouter, request: NodeRequest | Uint8Array): Promise<NodeReply> {
    const data = request instanceof Uint8Array ? request : encodeMessage(request);
    return decodeNodeReply(await router.serve(data));
  }

  test("counter - malformed bytes and out-of-range partitions get bad_frame, never a throw", async () => {
    const { router } = await setUp();
    expect(await ask(router, new Uint8Array([0xc1, 0x00]))).toMatchObject({
      type: "error",
      code: "bad_frame",
    });
    const outOfRange = { type: "presence", gateway: "g", partition: PARTITIONS, ops: [] } as const;
    expect(await ask(router, outOfRange)).toMatchObject({ type: "error", code: "bad_frame" });
    const pagesOutOfRange = {
      type: "presence_pages",
      gateway: "g",
      partition: PARTITIONS,
      pages: [],
    } as const;
    expect(await ask(router, pagesOutOfRange)).toMatchObject({ type: "error", code: "bad_frame" });
  });

  test("counter - a node_status request is answered by the node itself, never forwarded, through the codec", async () => {
    const { router, forwarded } = await setUp();
    const reply = await ask(router, { type: "node_status" });
    expect(reply).toEqual({ ...NODE_INFO, actors: u.registry.size });
    expect(forwarded).toEqual([]);
  });

  test("counter - a purge request is answered by the node itself, never forwarded, through the codec", async () => {
    const { router, forwarded } = await setUp();
    const reply = await ask(router, { type: "purge", olderThanMs: 60_000 });
    expect(reply).toEqual({
      type: "purged",
      node: "me",
      before: 940_000,
      pages: 1,
      counters: 2,
      kept: 3,
      failed: 0,
      waiting: 4,
    });
    expect(forwarded).toEqual([]);
  });

  test("counter - presence for another node's partition is refused, never forwarded", async () => {
    const { router, theirs, forwarded } = await setUp();
    const reply = await ask(router, { type: "presence", gateway: "g", partition: theirs, ops: [] });
    expect(reply).toMatchObject({ type: "error", code: "unavailable" });
    const pages = [[pageIn(theirs), ["v:a", holdCode(1, true)]]] as const;
    const grouped = await ask(router, { type: "presence_pages", gateway: "g", partition: theirs, pages });
    expect(grouped).toMatchObject({ type: "error", code: "unavailable" });
    expect(forwarded).toEqual([]);
  });

  test("counter - presence batches never wait for a lease; a sync does", async () => {
    const waits: number[] = [];
    const { router, mine } = await setUp({ onWait: (p) => waits.push(p) });
    // A partition of this node whose lease it does not hold yet (setUp acquires `mine` only).
    const ring = new HashRing(["me", "other"], { partitions: PARTITIONS });
    const pending = ring.partitionsOf("me").find((p) => p !== mine)!;
    expect(u.fences.get(pending)).toBeUndefined();
    const page = pageIn(pending);
    for (const request of [
      {
        type: "presence_pages",
        gateway: "g",
        partition: pending,
        pages: [[page, ["v:a", holdCode(1, true)]]],
      },
      { type: "presence", gateway: "g", partition: pending, ops: [{ page, viewer: "v:a", present: true }] },
    ] as const) {
      expect(await ask(router, request)).toMatchObject({ type: "error", code: "unavailable" });
    }
    expect(waits).toEqual([]);
    await ask(router, {
      type: "presence_sync",
      gateway: "g",
      partition: pending,
      pages: { [page]: ["v:a"] },
    });
    expect(waits).toEqual([pending]);
  });

  test("counter - presence grouped by page counts as the same ops one by one; a page of another partition applies nothing", async () => {
    const { router, mine, forwarded } = await setUp();
    const [a, b] = [pageIn(mine, 1), pageIn(mine, 2)];
    const viewers = (page: string): number => u.registry.find(page)?.value(VIEWERS_COUNTER) ?? 0;
    const connections = (page: string): number => u.registry.find(page)?.value(CONNECTIONS_COUNTER) ?? 0;
    const grouped = await ask(router, {
      type: "presence_pages",
      gateway: "g1",
      partition: mine,
      pages: [
        [
          a,
          [
            "v:1",
            holdCode(1, true),
            "v:2",
            holdCode(3, false),
            "v:3",
            holdCode(1, true),
            "v:3",
            HOLD_DROPPED,
          ],
        ],
        [b, ["v:1", holdCode(2, true)]],
      ],
    });
    expect(grouped).toEqual({ type: "ack" });
    const single = await ask(router, {
      type: "presence",
      gateway: "g2",
      partition: mine,
      ops: [
        { page: b, viewer: "v:9", present: true, sockets: 2 },
        { page: b, viewer: "v:1", present: true, active: false },
      ],
    });
    expect(single).toEqual({ type: "ack" });
    // v:3 was dropped at once; v:1 on b is one viewer held by two gateways.
    expect([viewers(a), connections(a), viewers(b), connections(b)]).toEqual([2, 4, 2, 5]);
    const other = pageIn((mine + 1) % PARTITIONS);
    const mixed = await ask(router, {
      type: "presence_pages",
      gateway: "g1",
      partition: mine,
      pages: [
        [a, ["v:4", holdCode(1, true)]],
        [other, ["v:5", holdCode(1, true)]],
      ],
    });
    expect(mixed).toMatchObject({ type: "error", code: "bad_frame" });
    expect(viewers(a)).toBe(2);
    expect(forwarded).toEqual([]);
  });

  test("counter - a read of another node's page is forwarded once, and a forwarded one is not forwarded again", async () => {
    const { router, theirs, forwarded } = await setUp();
    const page = pageIn(theirs);
    expect(await ask(router, { type: "snapshot", page })).toMatchObject({ type: "page_state" });
    expect(forwarded).toEqual([{ type: "snapshot", page, hop: 1 }]);
    const again = await ask(router, { type: "snapshot", page, hop: 1 });
    expect(again).toMatchObject({ type: "error", code: "unavailable" });
    expect(forwarded).toHaveLength(1);
  });

  test("counter - a forwarded read the owner never answers is refused as unavailable (retryable), never a timeout", async () => {
    const { router, theirs, forwarded } = await setUp({ otherHangs: true });
    const answer = ask(router, { type: "snapshot", page: pageIn(theirs) });
    await u.clock.advance(50);
    expect(await answer).toMatchObject({ type: "error", code: "unavailable" });
    expect(forwarded).toHaveLength(1);
  });

  test("counter - a node that is stopping answers unavailable", async () => {
    const { router, mine } = await setUp();
    running = false;
    expect(await ask(router, { type: "snapshot", page: pageIn(mine) })).toMatchObject({
      type: "error",
      code: "unavailable",
    });
  });

  test("counter - an increment of the presence counter or with a fractional delta is refused before it reaches an actor", async () => {
    const { router, mine } = await setUp();
    const page = pageIn(mine);
    const base = { type: "increment", page, key: "k" } as const;
    expect(await ask(router, { ...base, counter: "@viewers", delta: 1 })).toMatchObject({
      code: "bad_frame",
    });
    expect(await ask(router, { ...base, counter: "likes", delta: 0.5 })).toMatchObject({ code: "bad_frame" });
    expect(u.registry.size).toBe(0);
  });

  test("counter - a request whose actor closes under it answers unavailable, retryable", async () => {
    const { router, mine } = await setUp();
    const page = pageIn(mine);
    expect(partitionOf(page, PARTITIONS)).toBe(mine);
    u.store.failLoads = 1;
    expect(await ask(router, { type: "snapshot", page })).toMatchObject({
      type: "error",
      code: "unavailable",
    });
    expect(await ask(router, { type: "snapshot", page })).toMatchObject({ type: "page_state", page });
  });

  test("counter - a batch's items of this node's pages commit here, others go the general route, each answered in order", async () => {
    const { router, mine, theirs, forwarded } = await setUp({
      otherAnswers: (r) =>
        r.type === "increment"
          ? {
              type: "incremented",
              page: r.page,
              counter: r.counter,
              value: 40,
              updatedAt: 1,
              duplicate: false,
            }
          : { type: "error", code: "internal", message: "unexpected" },
    });
    const [here, there] = [pageIn(mine), pageIn(theirs)];
    const item = (page: string, key: string, delta = 1) =>
      ({ type: "increment", page, counter: "likes", delta, key }) as const;
    const batch = {
      type: "increments",
      items: [item(here, "a"), item(there, "b"), item(here, "c", 2), item(here, "a")],
    } as const;
    /** Serves the batch, turning the manual clock until it is answered (loads, the commit's turn). */
    const serve = async (): Promise<NodeReply> => {
      let answer: Uint8Array | undefined;
      void router.serve(encodeMessage(batch)).then((a) => (answer = a));
      for (let turn = 0; turn < 100 && answer === undefined; turn++) await u.clock.advance(0);
      if (answer === undefined) throw new Error("the batch was not answered");
      return decodeNodeReply(answer);
    };
    expect(await serve()).toMatchObject({
      type: "increments_done",
      replies: [
        { type: "incremented", page: here, value: 1, duplicate: false },
        { type: "incremented", page: there, value: 40 },
        { type: "incremented", page: here, value: 3, duplicate: false },
        { type: "incremented", page: here, value: 1, duplicate: true },
      ],
    });
    expect(forwarded).toEqual([{ ...item(there, "b"), hop: 1 }]);
    // A stopping node answers every item unavailable, retryable.
    running = false;
    expect(await serve()).toMatchObject({
      type: "increments_done",
      replies: batch.items.map(() => ({ type: "error", code: "unavailable" })),
    });
  });

  test("counter - a snapshots batch answers each page as its own snapshot would, in order, and cuts the reply at its size budget", async () => {
    // Another node's pages come back with 60% of the reply's budget each: the second one passes it.
    const counters: Record<string, Record<string, { p: number; n: number }>> = {};
    const bigState = { type: "page_state", page: "x", counters, ts: 1 } as const;
    // Long names and many data centers: the size in few entries, quick to encode and check.
    const dcs = Array.from({ length: 20 }, (_, d) => `${"d".repeat(100)}${d}`);
    for (let i = 0; pageStateBytes(bigState) < MAX_SNAPSHOT_REPLY_BYTES * 0.6; i++)
      counters[`${"c".repeat(60)}${i}`] = Object.fromEntries(dcs.map((dc) => [dc, { p: 1, n: 0 }]));
    const { router, mine, theirs, forwarded } = await setUp({
      otherAnswers: (r) =>
        r.type === "snapshot"
          ? { type: "page_state", page: r.page, counters, ts: 1 }
          : { type: "error", code: "internal", message: "unexpected" },
    });
    const [here, there, here2, there2, here3] = [
      pageIn(mine),
      pageIn(theirs),
      pageIn(mine, 1),
      pageIn(theirs, 1),
      pageIn(mine, 2),
    ];
    u.store.failLoads = 1;
    const reply = await ask(router, { type: "snapshots", pages: [here, there, here2, there2, here3] });
    expect(reply).toMatchObject({
      type: "page_states",
      replies: [
        // The store's first load fails: that page alone is unavailable, retryable.
        { type: "error", code: "unavailable" },
        { type: "page_state", page: there },
        { type: "page_state", page: here2, counters: {} },
        { type: "error", code: "payload_too_large" },
        // A page refused for its size takes none of the budget: a small one after it still fits.
        { type: "page_state", page: here3, counters: {} },
      ],
    });
    expect(forwarded).toEqual([
      { type: "snapshot", page: there, hop: 1 },
      { type: "snapshot", page: there2, hop: 1 },
    ]);
    // A forwarded batch is not forwarded again: each page of another node is refused.
    expect(await ask(router, { type: "snapshots", pages: [there, here2], hop: 1 })).toMatchObject({
      type: "page_states",
      replies: [
        { type: "error", code: "unavailable" },
        { type: "page_state", page: here2 },
      ],
    });
    expect(forwarded).toHaveLength(2);
  });
});
