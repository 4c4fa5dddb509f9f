/**
 * Empty pages leave no trace (issue 10, "Empty pages leave no trace"), on real processes in two
 * DCs: anonymous sockets join hundreds of invented pages in dc1 and leave; once
 * LIVECOUNT_EMPTY_PAGE_TTL_S has passed, neither DC's Redis holds anything of them (no page key,
 * no listing, no index entry; only per-partition bookkeeping, bounded by the partition count) and
 * prefix listings are as they were. A viewer who later comes to one of those pages counts exactly
 * in both DCs, though each DC removed the page on its own schedule. Before, every anonymous join
 * wrote a page that was never deleted.
 */
import { Redis } from "ioredis";
import { expect, onTestFinished, test } from "vitest";
import { describeWithServers } from "../support/servers.js";
import { TIMINGS } from "../support/cluster.js";
import { publisherOf } from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { startDataCenters, type TestDc } from "../support/multi_dc.js";
import type { HttpAnswer, PageTotals } from "../support/publisher_http.js";
import { TestClient } from "../support/ws_client.js";

const FLOOD_SOCKETS = 10;
/** LIVECOUNT_MAX_PAGES_PER_SOCKET's default: each socket joins as many pages as it may. */
const PAGES_PER_SOCKET = 64;
const TTL_S = 2;
/** Removal is due TTL after the page emptied; sweeps run every second at this TTL. */
const REMOVED_WITHIN_MS = 15_000;
const TEST_TIMEOUT_MS = 90_000;

/** Every key of a Redis with its content, as text: what a page id left anywhere shows up in it. */
async function dump(redis: Redis): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const key of await redis.keys("*")) {
    const type = await redis.type(key);
    let content: unknown;
    if (type === "string") content = await redis.get(key);
    else if (type === "hash") content = await redis.hgetall(key);
    else if (type === "set") content = await redis.smembers(key);
    else if (type === "zset") content = await redis.zrange(key, "0", "-1");
    else content = type;
    out.set(key, JSON.stringify(content));
  }
  return out;
}

type Listing = { pages: PageTotals[]; cursor?: string | null };

/** The page ids a prefix listing shows in `dc` (with the publisher key listings need). */
async function listed(dc: TestDc, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | null | undefined = "";
  while (typeof cursor === "string") {
    const res: HttpAnswer<Listing> = await publisherOf(dc).read(`prefix=${prefix}&cursor=${cursor}`);
    if (res.status !== 200) throw new Error(`${dc.name}: listing answered ${res.status}`);
    out.push(...res.body.pages.map((p) => p.page));
    cursor = res.body.cursor;
  }
  return out;
}

describeWithServers("multi-dc - empty pages", () => {
  test(
    "multi-dc - an anonymous page flood leaves both DCs' Redis and listings as they were after the TTL, and a viewer who comes later counts exactly in both",
    async () => {
      const multi = await startDataCenters({
        counters: 2,
        env: { LIVECOUNT_EMPTY_PAGE_TTL_S: String(TTL_S) },
      });
      const dc1 = multi.dc("dc1");
      const dc2 = multi.dc("dc2");
      const redis = new Map(multi.dcs.map((dc) => [dc.name, new Redis(dc.redis.url)]));
      const clients: TestClient[] = [];
      onTestFinished(async () => {
        await Promise.all(clients.map((c) => c.terminate()));
        for (const r of redis.values()) r.disconnect();
      });
      const before = new Map(
        await Promise.all(multi.dcs.map(async (dc) => [dc.name, await dump(redis.get(dc.name)!)] as const)),
      );

      // --- the flood: anonymous sockets join invented pages, are counted, and leave -------------------
      const pages: string[] = [];
      for (let s = 0; s < FLOOD_SOCKETS; s++) {
        const client = await TestClient.connect(dc1.gateways[0]!.wsUrl);
        clients.push(client);
        for (let p = 0; p < PAGES_PER_SOCKET; p++) {
          const page = `flood-${s}-${p}`;
          pages.push(page);
          client.join(page, `ghost-${s}`);
        }
      }
      for (const dc of multi.dcs)
        await eventually(async () => expect(await listed(dc, "flood-")).toHaveLength(pages.length), {
          timeoutMs: 15_000,
          message: `${dc.name} lists every flooded page`,
        });
      await Promise.all(clients.splice(0).map((c) => c.close()));

      // --- past the TTL, nothing of them is left in either DC ---------------------------------------
      for (const dc of multi.dcs) {
        const r = redis.get(dc.name)!;
        await eventually(
          async () => {
            const now = await dump(r);
            const traces = [...now].filter(([key, content]) => (key + content).includes("flood-"));
            expect(traces.slice(0, 3), `${dc.name}: keys still naming a flooded page`).toEqual([]);
          },
          { timeoutMs: REMOVED_WITHIN_MS, intervalMs: 250, message: `${dc.name} forgets the flood` },
        );
        const now = await dump(r);
        const added = [...now.keys()].filter((key) => !before.get(dc.name)!.has(key));
        // What may stay is per partition (its digest hash with the presence floor), never per page.
        expect(
          added.filter((key) => !/^lc:digest:\d+$/.test(key)),
          `${dc.name}: keys the flood added`,
        ).toEqual([]);
        expect(added.length).toBeLessThanOrEqual(TIMINGS.partitions);
        expect(await listed(dc, "flood-"), `${dc.name} lists no flooded page`).toEqual([]);
      }

      // --- a viewer comes back to one of them in each DC: both DCs count exactly ------------------------
      const comeback = [pages[7]!, pages[300]!];
      const watchers = await Promise.all(
        multi.dcs.map(async (dc) => {
          const client = await TestClient.connect(dc.gateways[0]!.wsUrl);
          clients.push(client);
          for (const page of comeback) client.watch(page);
          return client;
        }),
      );
      const viewer1 = await TestClient.connect(dc1.gateways[0]!.wsUrl);
      const viewer2 = await TestClient.connect(dc2.gateways[0]!.wsUrl);
      clients.push(viewer1, viewer2);
      viewer1.join(comeback[0]!, "back-1");
      viewer2.join(comeback[1]!, "back-2");
      for (const [i, dc] of multi.dcs.entries()) {
        for (const page of comeback) await watchers[i]!.waitForViewers(page, 1);
        const totals = await publisherOf(dc).totals(...comeback);
        expect(
          totals.map((t) => t.viewers),
          `${dc.name}: viewers of the pages viewers came back to`,
        ).toEqual([1, 1]);
      }
      // Exactly: they stay at one, not one plus what the old entries held.
      viewer1.leave(comeback[0]!);
      for (const [i] of multi.dcs.entries()) await watchers[i]!.waitForViewers(comeback[0]!, 0);
    },
    TEST_TIMEOUT_MS,
  );
});
