import { MemoryBus, nodesSubject } from "@livecount/bus";
import { encodeMessage } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Membership } from "../src/membership.js";

const LEASE_MS = 3_000;
/** Heartbeats go out, and silent nodes are looked for, every third of the lease. */
const BEAT_MS = LEASE_MS / 3;

/**
 * A node's lease on the ring is a duration the process judges on its own: its monotonic clock
 * times it, so NTP or an operator stepping the wall clock neither keeps a dead node on the ring
 * (requests routed to it) nor takes a live one off (its partitions moved for nothing).
 */
describe("cluster - membership under a stepped wall clock", () => {
  let bus: MemoryBus | undefined;
  let membership: Membership | undefined;
  afterEach(async () => {
    membership?.stop();
    await bus?.close();
  });

  test.each([-60_000, 60_000])(
    "cluster - a silent node leaves the ring a lease after it was last heard, with the wall clock stepped %i ms",
    async (stepMs) => {
      const clock = new ManualClock();
      bus = new MemoryBus({ clock });
      const m = (membership = new Membership({
        bus,
        clock,
        logger: silentLogger,
        dc: "dc1",
        partitions: 16,
        vnodes: 8,
        leaseMs: LEASE_MS,
        self: "n-a",
      }));
      m.start();
      bus.publish(
        nodesSubject("dc1"),
        encodeMessage({ type: "node", node: "n-b", incarnation: "b1", leaseMs: LEASE_MS, state: "up" }),
      );
      await bus.flush();
      expect(m.ring.nodes).toEqual(["n-a", "n-b"]);
      clock.stepWall(stepMs);
      await clock.advance(LEASE_MS);
      expect(m.ring.nodes).toEqual(["n-a", "n-b"]);
      await clock.advance(BEAT_MS);
      expect(m.ring.nodes).toEqual(["n-a"]);
    },
  );
});
