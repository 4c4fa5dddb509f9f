import { silentLogger } from "@livecount/runtime";
import { MemoryStore, StoreError } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { PartitionOwnership } from "../src/partition_ownership.js";

const LEASE_MS = 3000;
const RETRY_MS = 300;

/**
 * One node's ownership over an in-memory store on `clock`; `beforeRenew` runs as each renewal
 * reaches the store (it may step the wall clock, or throw as a store that cannot be reached).
 */
function ownershipOn(
  clock: ManualClock,
  { mayAcquire, beforeRenew }: { mayAcquire?: () => boolean; beforeRenew?: () => void } = {},
): PartitionOwnership {
  const store = new (class extends MemoryStore {
    override async renew(...args: Parameters<MemoryStore["renew"]>) {
      beforeRenew?.();
      return super.renew(...args);
    }
  })({ now: () => clock.now() });
  return new PartitionOwnership({
    store,
    clock,
    logger: silentLogger,
    node: "n1/a",
    leaseMs: LEASE_MS,
    retryMs: RETRY_MS,
    ...(mayAcquire !== undefined ? { mayAcquire } : {}),
  });
}

/** An ownership holding partition 0, whose renewals fail while `renewals.failing` (Redis unreachable). */
async function holdingZero(clock: ManualClock) {
  const renewals = { failing: false };
  const ownership = ownershipOn(clock, {
    beforeRenew: () => {
      if (renewals.failing) throw new StoreError("Redis is unreachable");
    },
  });
  ownership.start();
  await ownership.setWanted([0]);
  return { ownership, renewals };
}

describe("partition ownership", () => {
  test("ownership - while mayAcquire says no, wanted partitions are not taken, held ones stay renewed, and they are taken within a retry once it says yes", async () => {
    const clock = new ManualClock();
    let may = true;
    const ownership = ownershipOn(clock, { mayAcquire: () => may });
    ownership.start();
    await ownership.setWanted([0]);
    expect(ownership.held()).toEqual([[0, 1]]);
    may = false;
    await ownership.setWanted([0, 1, 2]);
    // Past two leases: partition 0 renewed all along, 1 and 2 never taken.
    await clock.advance(2 * LEASE_MS);
    expect(ownership.held()).toEqual([[0, 1]]);
    expect(ownership.fenceOf(0)).toBeDefined();
    may = true;
    await clock.advance(RETRY_MS);
    expect(ownership.held()).toEqual([
      [0, 1],
      [1, 1],
      [2, 1],
    ]);
    await ownership.close();
  });

  test("ownership - a restart takes its predecessor's live leases at once; a process past its first lease takes none from a later one", async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ now: () => clock.now() });
    const process = (incarnation: string) =>
      new PartitionOwnership({
        store,
        clock,
        logger: silentLogger,
        node: `n1/${incarnation}`,
        reclaimFrom: "n1/",
        leaseMs: LEASE_MS,
        retryMs: RETRY_MS,
      });
    const first = process("a");
    first.start();
    await first.setWanted([0, 1]);
    await clock.advance(2 * LEASE_MS);
    expect(first.held()).toEqual([
      [0, 1],
      [1, 1],
    ]);
    // A later process under the same node id (the first one frozen meanwhile): its leases at once,
    // and a partition the first never held.
    const later = process("b");
    later.start();
    await later.setWanted([0, 1, 2]);
    expect(later.held()).toEqual([
      [0, 2],
      [1, 2],
      [2, 1],
    ]);
    // The first one thaws: its renewals find its leases gone, and it waits for them, as for any live
    // holder, rather than taking them back with new epochs, and takes none it never held either:
    // otherwise the two would take them from each other in turn.
    const losses: number[] = [];
    first.onLoss((partition) => void losses.push(partition));
    await first.setWanted([0, 1, 2]);
    await clock.advance(3 * LEASE_MS);
    expect(losses.sort()).toEqual([0, 1]);
    expect(first.held()).toEqual([]);
    expect(later.held()).toEqual([
      [0, 2],
      [1, 2],
      [2, 1],
    ]);
    first.abandon();
    await later.close();
  });

  test("ownership - a wall clock that steps back during a renewal does not push the next one out by as much", async () => {
    const clock = new ManualClock();
    /** When each renewal went out, by the wall clock. */
    const renewals: number[] = [];
    const ownership = ownershipOn(clock, {
      beforeRenew: () => {
        renewals.push(clock.now());
        // The first renewal's answer comes after the wall clock stepped back a minute.
        if (renewals.length === 1) clock.stepWall(-60_000);
      },
    });
    ownership.start();
    await ownership.setWanted([0]);
    await clock.advance(LEASE_MS / 3);
    // The next one a third of a lease after the step, not a minute and a third later.
    expect(renewals[1]! - (renewals[0]! - 60_000)).toBe(LEASE_MS / 3);
    expect(ownership.held()).toEqual([[0, 1]]);
    await ownership.close();
  });

  test("ownership - a wall clock that steps back while renewals fail does not keep a partition served past its lease", async () => {
    const clock = new ManualClock();
    const { ownership, renewals } = await holdingZero(clock);
    renewals.failing = true;
    clock.stepWall(-60_000);
    await clock.advance(LEASE_MS - 1);
    expect(ownership.fenceOf(0)).toBeDefined();
    // A lease after it was taken, whatever the wall clock says: another node may hold it now.
    await clock.advance(1);
    expect(ownership.fenceOf(0)).toBeUndefined();
    renewals.failing = false;
    await clock.advance(RETRY_MS);
    expect(ownership.fenceOf(0)).toBeDefined();
    await ownership.close();
  });

  test("ownership - a request waiting for a partition whose lease ran out here gets its fence when a late renewal keeps it", async () => {
    const clock = new ManualClock();
    const { ownership, renewals } = await holdingZero(clock);
    renewals.failing = true;
    await clock.advance(LEASE_MS);
    expect(ownership.fenceOf(0)).toBeUndefined();
    let got: unknown = "waiting";
    void ownership.whenHeld(0, 10 * LEASE_MS).then((fence) => (got = fence));
    renewals.failing = false;
    await clock.advance(RETRY_MS);
    // Renewed with its epoch (nobody took it): the waiter has it at once, not at its timeout.
    expect(got).toEqual(ownership.fenceOf(0));
    expect(ownership.fenceOf(0)).toBeDefined();
    await ownership.close();
  });

  test("ownership - a write refused under the lease held loses it; one refused under an earlier tenure's lease changes nothing", async () => {
    const clock = new ManualClock();
    const losses: Array<[number, string]> = [];
    const ownership = ownershipOn(clock);
    ownership.onLoss((partition, reason) => void losses.push([partition, reason]));
    ownership.start();
    await ownership.setWanted([0, 1]);
    const [first] = ownership.held();
    // A flush under epoch 1 of partition 0 in flight while the lease was lost and taken back (epoch
    // 2 here): its refusal is of the earlier tenure.
    ownership.refused({ partition: 0, node: "n1/a", epoch: first![1] - 1 });
    expect(losses).toEqual([]);
    expect(ownership.fenceOf(0)).toBeDefined();
    // Refused under the lease held: another node has the partition.
    ownership.refused({ partition: 1, node: "n1/a", epoch: ownership.held()[1]![1] });
    expect(losses).toEqual([[1, "lost"]]);
    expect(ownership.fenceOf(1)).toBeUndefined();
    expect(ownership.held().map(([p]) => p)).toEqual([0]);
    await ownership.close();
  });

  test("ownership - a partition released twice at once (a shutdown during a hand-over) is flushed and released once", async () => {
    const clock = new ManualClock();
    const losses: Array<[number, string]> = [];
    const ownership = ownershipOn(clock);
    ownership.onLoss(async (partition, reason) => {
      losses.push([partition, reason]);
      await clock.advance(10);
    });
    ownership.start();
    await ownership.setWanted([0, 1]);
    await Promise.all([ownership.setWanted([]), ownership.close()]);
    expect(losses.sort()).toEqual([
      [0, "released"],
      [1, "released"],
    ]);
    expect(ownership.held()).toEqual([]);
  });
});
