import { VIEWERS_COUNTER, type NodeReply } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { afterEach, describe, expect, test } from "vitest";
import { ManualNode } from "./manual_node.js";

const START_MS = 1_700_000_000_000;
const PARTITIONS = 4;
const PAGE = "stepped-page";
const GRACE_MS = 2_000;

/**
 * A counter node whose wall clock steps a minute (NTP, an operator): the deadlines of the process
 * itself (graces, gateway leases) are on its monotonic clock, so nobody counts past their grace or
 * their gateway's lease, and no live gateway's viewers are dropped.
 */
describe("counter - a wall clock stepping", () => {
  let n: ManualNode | undefined;

  afterEach(async () => {
    await n?.stop();
    n = undefined;
  });

  async function presence(viewer: string, present: boolean): Promise<void> {
    const partition = partitionOf(PAGE, PARTITIONS);
    const reply = await n!.ask({
      type: "presence",
      gateway: "gw-1",
      partition,
      ops: [{ page: PAGE, viewer, present }],
    });
    expect(reply.type).toBe("ack");
  }

  async function viewers(): Promise<number> {
    const reply: NodeReply = await n!.ask({ type: "snapshot", page: PAGE });
    if (reply.type !== "page_state") throw new Error(JSON.stringify(reply));
    const entry = reply.counters[VIEWERS_COUNTER]?.["dc1"] ?? { p: 0, n: 0 };
    return entry.p - entry.n;
  }

  test("counter - a viewer who left stops counting when its grace ends, though the wall clock stepped back a minute", async () => {
    n = await ManualNode.start(START_MS, {
      LIVECOUNT_PARTITIONS: String(PARTITIONS),
      LIVECOUNT_GRACE_MS: String(GRACE_MS),
      LIVECOUNT_GATEWAY_LEASE_MS: String(3_600_000),
    });
    await presence("v:stays", true);
    await presence("v:leaves", true);
    expect(await viewers()).toBe(2);
    await presence("v:leaves", false);
    n.clock.stepWall(-60_000);
    // The grace and a sweep or two: the departure counts then, not a minute later.
    await n.clock.advance(GRACE_MS + 2_000);
    expect(await viewers()).toBe(1);
  });

  test.each([-60_000, 60_000])(
    "counter - a gateway's viewers count for its lease from when it was last heard, with the wall clock stepped %i ms",
    async (stepMs) => {
      const leaseMs = 10_000;
      n = await ManualNode.start(START_MS, {
        LIVECOUNT_PARTITIONS: String(PARTITIONS),
        LIVECOUNT_GRACE_MS: String(GRACE_MS),
        LIVECOUNT_GATEWAY_LEASE_MS: String(leaseMs),
      });
      await presence("v:1", true);
      await presence("v:2", true);
      expect(await viewers()).toBe(2);
      // The gateway is killed as the wall clock steps: heard no more, it holds its viewers for its
      // lease and no longer (a step back kept them a minute more; one forward dropped them at once).
      n.clock.stepWall(stepMs);
      await n.clock.advance(leaseMs - 1_000);
      expect(await viewers()).toBe(2);
      await n.clock.advance(2_000);
      expect(await viewers()).toBe(0);
    },
  );
});
