import type { NodeReply } from "@livecount/protocol";
import { RedisStore } from "@livecount/store";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, expect, test } from "vitest";
import { RedisServer, describeWithRedis } from "../../../test/support/redis_server.js";
import { ManualNode } from "./manual_node.js";

const PAGE = "regressed-page";
const PREFIX = "lc:regression:";

/**
 * A Redis that lost its last writes under a live counter node (restarted from its last
 * `appendfsync everysec`): the entry it holds is below what the node counted and answered. Later
 * changes count on from the node's count, and the store gets it back, rather than building on the
 * lower entry and staying hidden behind the copies gateways and other DCs hold.
 */
describeWithRedis("counter - a store that lost writes", () => {
  let server: RedisServer;
  let raw: Redis;
  let n: ManualNode | undefined;
  /** Increments' keys are k1, k2, ... in each test. */
  let keys = 0;

  beforeAll(async () => {
    // Every write on disk before its answer: a restart here loses only what a test rolls back.
    server = await RedisServer.start({ appendonly: true, appendfsync: "always" });
    raw = new Redis(server.url);
  });

  afterAll(async () => {
    raw?.disconnect();
    await server?.stop();
  });

  afterEach(async () => {
    await n?.stop();
    n = undefined;
    await raw.flushall();
    keys = 0;
  });

  function increment(delta: number): Promise<NodeReply> {
    return n!.ask({ type: "increment", page: PAGE, counter: "likes", delta, key: `k${++keys}` });
  }

  async function likes(): Promise<number> {
    const reply = await n!.ask({ type: "snapshot", page: PAGE });
    if (reply.type !== "page_state") throw new Error(JSON.stringify(reply));
    const entry = reply.counters["likes"]?.["dc1"] ?? { p: 0, n: 0 };
    return entry.p - entry.n;
  }

  /** What a restart from an older append file leaves: this DC's entry of likes back at `p:n`. */
  async function loseWrites(p: number, n_: number): Promise<void> {
    const [pageKey] = await raw.keys(`${PREFIX}page:${PAGE}`);
    expect(pageKey).toBeDefined();
    await raw.hset(pageKey!, "likes\u0000dc1", `${p}:${n_}`);
  }

  /**
   * Each request here moves the manual clock until the real Redis answers: keys are kept long
   * enough for every retry below unless `memoryMs` says otherwise (recent_keys.test.ts holds the
   * memory to its length).
   */
  async function start(memoryMs = 60_000): Promise<void> {
    const env = { LIVECOUNT_PARTITIONS: "4", LIVECOUNT_IDEMPOTENCY_MEMORY_MS: String(memoryMs) };
    n = await ManualNode.start(1_700_000_000_000, env, (now) =>
      RedisStore.connect({ url: server.url, keyPrefix: PREFIX, now }),
    );
  }

  test("counter - increments after the loss count on from the owner's count, and the store gets it back", async () => {
    await start();
    for (let i = 1; i <= 10; i++) expect(await increment(1)).toMatchObject({ value: i });
    await loseWrites(5, 0);
    expect(await increment(1)).toMatchObject({ value: 11 });
    expect(await increment(-2)).toMatchObject({ value: 9 });
    expect(await likes()).toBe(9);
    // The next flush writes the owner's count back; changes after it build on it.
    await n!.clock.advance(1_000);
    expect(await raw.hget(`${PREFIX}page:${PAGE}`, "likes\u0000dc1")).toBe("11:2");
    expect(await increment(1)).toMatchObject({ value: 10 });
    expect(await raw.hget(`${PREFIX}page:${PAGE}`, "likes\u0000dc1")).toBe("12:2");
    // Counted for each change answered low: the first, and the second unless a flush came between.
    const regressions = /livecount_counter_store_regressions_total (\d+)/.exec(await n!.registry.metrics());
    expect(Number(regressions?.[1])).toBeGreaterThanOrEqual(1);
  });

  test("counter - a retry of a change whose key the store lost is answered from the owner's memory, and counts once", async () => {
    await start();
    for (let i = 1; i <= 10; i++) await increment(1);
    // The last five changes and their keys are gone from the store.
    await loseWrites(5, 0);
    for (let k = 6; k <= 10; k++) await raw.del(`${PREFIX}idem:${PAGE.length}:${PAGE}:k${k}`);
    const retry = await n!.ask({ type: "increment", page: PAGE, counter: "likes", delta: 1, key: "k8" });
    expect(retry).toMatchObject({ value: 8, duplicate: true });
    const conflict = await n!.ask({ type: "increment", page: PAGE, counter: "likes", delta: 2, key: "k9" });
    expect(conflict).toMatchObject({ type: "error", code: "idempotency_conflict" });
    expect(await likes()).toBe(10);
    expect(await increment(1)).toMatchObject({ value: 11 });
  });

  test("counter - when the store reconnects, the keys answered lately and the pages' entries go back to it, so a late retry of a lost key counts once", async () => {
    await start(5_000);
    for (let i = 1; i <= 10; i++) await increment(1);
    await loseWrites(5, 0);
    const lost = (k: number) => `${PREFIX}idem:${PAGE.length}:${PAGE}:k${k}`;
    for (let k = 6; k <= 10; k++) await raw.del(lost(k));
    // Redis restarts (from a file that lacks those writes): the node connects to a new run of it.
    await server.kill();
    await server.restart();
    const deadline = Date.now() + 10_000;
    while ((await raw.exists(lost(8)).catch(() => 0)) === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(await raw.exists(lost(8))).toBe(1);
    // And the page in memory writes its entry again: the store has the count without another change.
    for (let i = 0; i < 50 && (await raw.hget(`${PREFIX}page:${PAGE}`, "likes\u0000dc1")) !== "10:0"; i++)
      await new Promise((r) => setTimeout(r, 5)).then(() => n!.clock.advance(100));
    expect(await raw.hget(`${PREFIX}page:${PAGE}`, "likes\u0000dc1")).toBe("10:0");
    // After the memory forgot it (a step at a time: lease renewals wait for the real Redis), the
    // store answers the retry.
    for (let i = 0; i < 60; i++) await new Promise((r) => setTimeout(r, 5)).then(() => n!.clock.advance(100));
    const retry = await n!.ask({ type: "increment", page: PAGE, counter: "likes", delta: 1, key: "k8" });
    expect(retry).toMatchObject({ value: 8, duplicate: true });
    expect(await likes()).toBe(10);
  });

  test("counter - a reset after the loss cancels what the owner counted, not what the store kept", async () => {
    await start();
    for (let i = 1; i <= 10; i++) await increment(1);
    await loseWrites(4, 0);
    const reset = await n!.ask({
      type: "reset",
      page: PAGE,
      counter: "likes",
      key: "reset-1",
      tombstone: false,
    });
    expect(reset).toMatchObject({ previous: 10 });
    expect(await likes()).toBe(0);
    expect(await increment(3)).toMatchObject({ value: 3 });
    await n!.clock.advance(1_000);
    expect(await raw.hget(`${PREFIX}page:${PAGE}`, "likes\u0000dc1")).toBe("13:10");
  });
});
