import type { NodeReply, NodeRequest } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { afterEach, describe, expect, test } from "vitest";
import { ManualNode } from "./manual_node.js";

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
/** A UTC midnight, so days and hours are easy to read. */
const START_MS = 20_000 * DAY_MS;
const PARTITIONS = 4;
const PAGE = "stats-page";
const GRACE_MS = 1000;
/**
 * Two days of manual time fire every timer on the way (a sweep each 250 ms: some 700,000): 6 s on
 * an idle 2-core host, 24 s at nice 19 beside the timed clusters (test/run.mjs), past 30 s with a
 * core busy elsewhere. Bounded all the same, far above any of these.
 */
const WALK_TIMEOUT_MS = 120_000;

/**
 * Peaks and unique visitors on a counter node with an injected clock: what a stats request answers
 * as viewers come and go over minutes, hours and days.
 */
describe("counter - page stats", () => {
  let n: ManualNode | undefined;

  afterEach(async () => {
    await n?.stop();
    n = undefined;
  });

  async function start(): Promise<void> {
    n = await ManualNode.start(START_MS, {
      LIVECOUNT_PARTITIONS: String(PARTITIONS),
      LIVECOUNT_GRACE_MS: String(GRACE_MS),
      // A gateway lease longer than the test, so the one gateway here never expires; slow cycles
      // elsewhere, so days of manual time run few timers.
      LIVECOUNT_GATEWAY_LEASE_MS: String(10 * DAY_MS),
      LIVECOUNT_PARTITION_LEASE_MS: String(HOUR_MS),
      LIVECOUNT_NODE_LEASE_MS: String(HOUR_MS),
      LIVECOUNT_DC_HEARTBEAT_MS: "5000",
      LIVECOUNT_ANTI_ENTROPY_MS: String(HOUR_MS),
      LIVECOUNT_EMPTY_PAGE_TTL_S: "86400",
    });
  }

  function ask(request: NodeRequest): Promise<NodeReply> {
    return n!.ask(request);
  }

  async function presence(ops: Array<[viewer: string, present: boolean]>): Promise<void> {
    const partition = partitionOf(PAGE, PARTITIONS);
    const reply = await ask({
      type: "presence",
      gateway: "gw-1",
      partition,
      ops: ops.map(([viewer, present]) => ({ page: PAGE, viewer, present })),
    });
    expect(reply.type).toBe("ack");
  }

  async function stats(): Promise<{ peak1h: number; peak24h: number; unique24h: number }> {
    // Registers and peaks are read from the store at most once a second per page.
    await n!.to(n!.clock.now() + 1000);
    const reply = await ask({ type: "stats", page: PAGE });
    if (reply.type !== "page_stats") throw new Error(JSON.stringify(reply));
    return { peak1h: reply.peak1h, peak24h: reply.peak24h, unique24h: reply.unique24h };
  }

  async function at(ms: number): Promise<void> {
    await n!.to(START_MS + ms);
  }

  test(
    "counter - peaks keep the most viewers of the last hour and day; unique visitors count each viewer once a day",
    async () => {
      await start();
      await at(10_000);
      await presence([
        ["v:a", true],
        ["v:b", true],
        ["v:c", true],
      ]);
      // The same viewer on another gateway, and a reconnect within the grace: still three visitors.
      await presence([["v:a", true]]);
      await at(30_000);
      await presence([
        ["v:b", false],
        ["v:c", false],
      ]);
      await at(5 * MINUTE_MS);
      expect(await stats()).toEqual({ peak1h: 3, peak24h: 3, unique24h: 3 });
      await presence([["v:d", true]]);
      expect((await stats()).unique24h).toBe(4);

      // An hour on, the minute buckets of the peak are out of reach; the hour's are not.
      await at(HOUR_MS + 6 * MINUTE_MS);
      expect(await stats()).toMatchObject({ peak1h: 0, peak24h: 3 });
      // Viewers change: the hour's peak starts with the value carried in (2: a and d), then rises.
      await presence([["v:e", true]]);
      expect(await stats()).toMatchObject({ peak1h: 3, peak24h: 3, unique24h: 5 });

      // The next day: yesterday's visitors still count, and those present count again today.
      await at(DAY_MS + 10 * MINUTE_MS);
      await presence([["v:f", true]]);
      expect(await stats()).toMatchObject({ unique24h: 6, peak24h: 4 });
      // Two days on, yesterday's registers are out of reach: the visitors present today remain.
      await at(2 * DAY_MS + 10 * MINUTE_MS);
      await presence([["v:g", true]]);
      expect(await stats()).toMatchObject({ unique24h: 5 });
    },
    WALK_TIMEOUT_MS,
  );
});
