/**
 * A new data center learning every page from its peer while its counter nodes stall, with real
 * processes (test/support/multi_dc.ts): dc2 starts with an empty Redis while likes keep coming at
 * dc1, and each of its two counter nodes is frozen (SIGSTOP) in turn for 0.9 to 2.1 s, past its
 * 1 s partition lease and, some of the time, its node lease. Leases run out and are renewed late,
 * are lost and taken back with new epochs, and change hands between the two nodes, while the
 * partitions bootstrap and other DCs' entries arrive. When the freezing stops, both nodes must be
 * ready and every page exact in dc2 within a few anti-entropy periods (5 s here, 10 s by default):
 * a like whose update reached only a node frozen past its lease, which then lost the partition, is
 * brought by the next comparison, not at once (docs/architecture.md).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { expect, test } from "vitest";
import { CONVERGE_MS, addLikes, pageIds, publisherOf, readTotals } from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { random } from "../support/fault_scenes.js";
import { startDataCenters } from "../support/multi_dc.js";
import { describeWithServers } from "../support/servers.js";

const PAGES = 400;
const STALLS = 8;
const TEST_TIMEOUT_MS = 120_000;
/** Comparisons with every live DC this often (multi_dc.ts sets ten minutes, out of every other test's way). */
const ANTI_ENTROPY_MS = 5_000;
/** Exact within this after the stalls: three comparisons (seen: within two), and the usual bound on top. */
const EXACT_WITHIN_MS = 3 * ANTI_ENTROPY_MS + CONVERGE_MS;

describeWithServers("multi-dc - stalls while bootstrapping", () => {
  test(
    "multi-dc - a new DC whose counter nodes stall past their leases while it learns, likes flowing at its peer, is ready and exact once they stop",
    async () => {
      const multi = await startDataCenters({
        counters: 2,
        late: ["dc2"],
        env: { LIVECOUNT_PARTITION_LEASE_MS: "1000", LIVECOUNT_ANTI_ENTROPY_MS: String(ANTI_ENTROPY_MS) },
        dcEnv: { dc2: { LIVECOUNT_PEER_DCS: "dc1" } },
      });
      const dc1 = multi.dc("dc1");
      const dc2 = multi.dc("dc2");
      const pages = pageIds("stalls", PAGES);
      const truth = new Map(pages.map((page, i) => [page, 1 + (i % 5)]));
      await addLikes(dc1, truth, "seed");

      // Likes at dc1 one after another until the stalls end, each retried with its key until answered.
      const rnd = random("multi-dc stalls while bootstrapping");
      const http = publisherOf(dc1);
      let liking = true;
      let sent = 0;
      const likes = (async () => {
        while (liking) {
          const page = pages[Math.floor(rnd() * PAGES)]!;
          const key = `live-${sent++}`;
          await eventually(async () => expect((await http.change(page, "likes", 1, key)).status).toBe(200), {
            timeoutMs: CONVERGE_MS,
            message: `like ${key} answered`,
          });
          truth.set(page, truth.get(page)! + 1);
          await sleep(5);
        }
      })();

      await dc2.launch();
      const stalls: string[] = [];
      for (let i = 0; i < STALLS; i++) {
        await sleep(200 + Math.floor(rnd() * 600));
        const node = dc2.counters[Math.floor(rnd() * dc2.counters.length)]!;
        const ms = 900 + Math.floor(rnd() * 1200);
        node.pause();
        await sleep(ms);
        node.resume();
        stalls.push(`${node.nodeId} ${ms} ms`);
      }
      await dc2.waitBalanced();
      liking = false;
      await likes;

      await eventually(
        async () => {
          const totals = await readTotals(dc2, pages);
          const wrong = pages.filter((page) => totals.get(page)?.counters.likes !== truth.get(page));
          expect(wrong.map((page) => [page, totals.get(page)?.counters.likes, truth.get(page)])).toEqual([]);
        },
        { timeoutMs: EXACT_WITHIN_MS, message: "every page exact in dc2" },
      );
      console.info(`multi-dc stalls while bootstrapping: ${JSON.stringify({ stalls, likes: sent })}`);
    },
    TEST_TIMEOUT_MS,
  );
});
