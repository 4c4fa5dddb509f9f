/**
 * Two data centers of real processes, as in multi_dc.test.ts (per DC a nats-server joined to the
 * other's through a cuttable link, a redis-server with AOF, two counter nodes and a gateway), with
 * real WebSocket viewers and watchers and real HTTP reads and likes: a counter node's successor gets
 * the other DC's changes made while nobody owned its partitions; a DC that dies leaves the other's
 * viewer totals after its lease but not its likes, and converges when it comes back from its AOF;
 * a DC restarted after a crash stops counting its dead viewers.
 *
 * Deadlines derive from the DC lease (DC_TIMINGS); every wait polls. A failed test prints every
 * process's log. The processes are started once for the file; each test uses its own pages.
 */
import { test } from "vitest";
import { TIMINGS } from "../support/cluster.js";
import { pageIds } from "../support/cluster_scene.js";
import { eventually } from "../support/eventually.js";
import { DC_TIMINGS, type MultiDc, type TestDc } from "../support/multi_dc.js";
import { describeWithServers } from "../support/servers.js";
import type { World } from "./world.js";
import {
  CONVERGE_MS,
  RESTART_CONVERGE_MS,
  SLACK_MS,
  TEST_TIMEOUT_MS,
  expectReads,
  twoDataCenters,
  waitShows,
  type Expected,
} from "./world.js";

describeWithServers("multi-dc - two data centers: a counter node or a whole DC killed", () => {
  let multi: MultiDc;
  let world: World;
  let dc1: TestDc;
  let dc2: TestDc;
  const ALL: readonly string[] = ["dc1", "dc2"];
  /** Prints every process's log when the current test fails. */
  const logsOnFailure = twoDataCenters((dcs) => ({ multi, world, dc1, dc2 } = dcs));

  test(
    "multi-dc - a counter node killed in one DC: the new owner of its partitions gets the other DC's changes made while nobody owned them",
    async () => {
      logsOnFailure();
      const pages = pageIds("takeover", 16);
      for (const page of pages) {
        await world.like(dc1, page);
        await world.like(dc2, page);
      }
      const global = (page: string): Expected => world.truth(page, ALL);
      await eventually(() => expectReads(dc2, pages, global, ALL), {
        timeoutMs: CONVERGE_MS,
        message: "dc2 reads the global likes before the kill",
      });

      // dc2 loses a counter node; its partitions have no owner in dc2 until their leases run out,
      // and the likes dc1 makes meanwhile reach no owner there.
      const [victim, survivor] = dc2.counters;
      await victim!.kill();
      for (const page of pages) await world.like(dc1, page);
      await eventually(
        async () => {
          const owned = await survivor!.metric("livecount_counter_partitions_owned");
          if (owned !== TIMINGS.partitions) throw new Error(`${survivor!.nodeId} owns ${owned} partitions`);
        },
        {
          timeoutMs: TIMINGS.partitionLeaseMs + TIMINGS.nodeLeaseMs + SLACK_MS,
          message: "the survivor took over",
        },
      );
      // Reads come from the owner (its memory and dc2's Redis), not from what gateways saw go by.
      await eventually(() => expectReads(dc2, pages, global, ALL), {
        timeoutMs: CONVERGE_MS,
        message: "dc2's new owner has the likes dc1 made while nobody owned the partitions",
      });

      await victim!.start();
      await dc2.waitBalanced();
      await eventually(() => expectReads(dc2, pages, global, ALL), {
        timeoutMs: CONVERGE_MS,
        message: "dc2 reads the global likes after the node came back",
      });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "multi-dc - a whole DC killed leaves the other DC's viewer totals after the lease and keeps its likes; restarted from its AOF it converges",
    async () => {
      logsOnFailure();
      const pages = pageIds("dcdeath", 6);
      await world.watch(dc1, pages);
      await world.watch(dc2, pages);
      for (const [i, page] of pages.entries()) {
        await world.join(dc1, page);
        for (let v = 0; v < (i % 2) + 1; v++) await world.join(dc2, page);
        await world.like(dc1, page);
        for (let l = 0; l < i + 1; l++) await world.like(dc2, page);
      }
      const global = (page: string): Expected => world.truth(page, ALL);
      await waitShows(world, dc1, pages, global, { dcs: ALL, when: "before the DC dies" });
      await waitShows(world, dc2, pages, global, { dcs: ALL, when: "before the DC dies" });

      // --- dc2 dies: every process, its nats-server and its redis-server, kill -9 ----------------
      await dc2.kill();
      world.forgetViewers(dc2);
      world.watchers.delete("dc2");
      const dc1Only = (page: string): Expected => world.truth(page, ["dc1"]);
      await waitShows(world, dc1, pages, dc1Only, {
        dcs: ["dc1"],
        timeoutMs: DC_TIMINGS.leaseMs + SLACK_MS,
        when: "drops the dead DC's viewers after its lease, keeps its likes",
      });
      // dc1 keeps counting meanwhile.
      for (const page of pages) await world.like(dc1, page);
      await waitShows(world, dc1, pages, dc1Only, { dcs: ["dc1"], when: "counts likes while dc2 is dead" });

      // --- dc2 comes back: same ports, Redis from its AOF; half its viewers come back ----------------
      await dc2.start();
      await multi.waitLinked();
      await world.watch(dc2, pages);
      for (const [i, page] of pages.entries()) if (i % 2 === 0) await world.join(dc2, page);
      await waitShows(world, dc2, pages, global, {
        dcs: ALL,
        timeoutMs: RESTART_CONVERGE_MS,
        when: "restarted, shows the global truth",
      });
      await waitShows(world, dc1, pages, global, {
        dcs: ALL,
        timeoutMs: RESTART_CONVERGE_MS,
        when: "shows the restarted DC again",
      });
    },
    TEST_TIMEOUT_MS,
  );

  // A restarted DC's owners find the pages whose own viewers entry is non-zero (Store.nonZeroEntries)
  // and settle them, so a page nobody touches there drops the dead viewers too.
  test(
    "multi-dc - a DC restarted after a crash stops counting its dead viewers even on pages nobody there touches",
    async () => {
      logsOnFailure();
      const quiet = ["ghost-0"];
      await world.watch(dc1, quiet);
      await world.join(dc2, quiet[0]!);
      await world.join(dc2, quiet[0]!);
      await world.like(dc2, quiet[0]!);
      const global = (page: string): Expected => world.truth(page, ALL);
      await waitShows(world, dc1, quiet, global, { dcs: ALL, when: "before the DC dies" });
      await dc2.kill();
      world.forgetViewers(dc2);
      world.watchers.delete("dc2");
      const dc1Only = (page: string): Expected => world.truth(page, ["dc1"]);
      await waitShows(world, dc1, quiet, dc1Only, {
        dcs: ["dc1"],
        timeoutMs: DC_TIMINGS.leaseMs + SLACK_MS,
        when: "drops the dead DC's viewers after its lease",
      });
      await dc2.start();
      await multi.waitLinked();
      await waitShows(world, dc1, quiet, global, {
        dcs: ALL,
        timeoutMs: RESTART_CONVERGE_MS,
        when: "shows the restarted DC again, without its dead viewers",
      });
    },
    TEST_TIMEOUT_MS,
  );
});
