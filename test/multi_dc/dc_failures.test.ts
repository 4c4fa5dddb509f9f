/**
 * Failures between data centers, with real processes (per DC a nats-server joined to the other's
 * by NATS gateways through a cuttable link, a redis-server, a counter node and a gateway), checked
 * against docs/architecture.md ("Multiple data centers") and docs/protocol.md: a cut shorter than
 * the DC lease (a "gap"), deletes and resets concurrent with increments in the other DC, and an
 * idempotency key retried in the other DC.
 *
 * The DC lease is longer here than in the other multi-DC tests, so that a cut plus the ~1 s NATS
 * takes to re-dial stays well inside it. Periodic anti-entropy is far beyond the file's length
 * (DC_TIMINGS): whatever a cut lost must come back through what the reconnection itself triggers.
 */
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { Crowd, startEvery } from "../support/crowd.js";
import { publisherOf } from "../support/dc_pages.js";
import { eventually, sleep } from "../support/eventually.js";
import { DC_TIMINGS, MultiDc, type TestDc } from "../support/multi_dc.js";
import type { PageTotals } from "../support/publisher_http.js";
import type { CountFrame, TestClient } from "../support/ws_client.js";
import { describeWithServers } from "../support/servers.js";

const DC_LEASE_MS = 6000;
/** Shorter than the DC lease even with NATS's re-dial (~1 s) and a loaded machine on top. */
const CUT_MS = 1500;
/** BRIEF.md invariant 6: every DC identical within 1 s of the link being back. */
const HEAL_CONVERGENCE_GOAL_MS = 1000;
/**
 * Slack over the goal for a loaded 2-core machine, where the test's own link proxy and sequential
 * reads share the cores with two DCs (the goal itself is the multi-dc benchmark's line).
 */
const SLACK_MS = 2000;
const CONVERGE_MS = 10_000;
const SAMPLE_MS = 50;
/**
 * anti_entropy.ts compares again 1 s and 4 s after a DC is heard (again) or after a gap: a cut
 * that fell in such a follow-up would be repaired by it, proving nothing about the gap. Cuts wait
 * this long after the last such event.
 */
const FOLLOW_UPS_MS = 4000 + 1000;
/** How far past the DC lease dc1's NATS stays frozen. */
const FREEZE_PAST_LEASE_MS = 1500;
const TEST_TIMEOUT_MS = 60_000;
const ALL = ["dc1", "dc2"];

async function totals(dc: TestDc, page: string): Promise<PageTotals> {
  const [body] = await publisherOf(dc).totals(page);
  return body!;
}

describeWithServers("multi-dc - failures between data centers", () => {
  let multi: MultiDc;
  let crowd: Crowd;
  let dc1: TestDc;
  let dc2: TestDc;
  /** When the DCs last heard each other (again): the start, or a heal. */
  let heardAt = 0;

  beforeAll(async () => {
    multi = await MultiDc.start({
      counters: 1,
      gateways: 1,
      env: { LIVECOUNT_DC_LEASE_MS: String(DC_LEASE_MS) },
    });
    crowd = new Crowd();
    dc1 = multi.dc("dc1");
    dc2 = multi.dc("dc2");
    heardAt = Date.now();
  }, 120_000);

  afterAll(async () => {
    await crowd?.close();
    await multi?.stop();
  }, 60_000);

  function logsOnFailure(): void {
    onTestFailed(() => {
      console.error(`\n----- logs of every process (kept in ${multi.logDir}) -----\n${multi.logs()}\n`);
    });
  }

  /** Heals the link and resolves with when NATS had the gateway connections up again, both ways. */
  async function healAndWaitLinked(): Promise<number> {
    multi.heal();
    let notLinkedAt = Date.now();
    await eventually(
      async () => {
        const polledAt = Date.now();
        if (!(await multi.gatewaysConnected())) {
          notLinkedAt = polledAt;
          throw new Error("gateway connections are not all up");
        }
      },
      { timeoutMs: CONVERGE_MS, intervalMs: 20, message: "NATS gateways connected after the heal" },
    );
    heardAt = Date.now();
    // They came back at some moment after the last poll that saw them down: measuring from there
    // never flatters what follows.
    return notLinkedAt;
  }

  test(
    "multi-dc - an idempotency key retried in the other DC is a replay there once the key reached it, for the batch API's ids too",
    async () => {
      logsOnFailure();
      const page = "idem-across-dcs";
      const [api1, api2] = [publisherOf(dc1), publisherOf(dc2)];
      // dc1 sends keys once it has heard dc2 (or LIVECOUNT_PEER_DCS names it).
      await dc1.waitHeard("dc2");
      const before = await dc2.keysStored();
      const waitKeys = (count: number): Promise<void> =>
        eventually(async () => expect(await dc2.keysStored()).toBeGreaterThanOrEqual(before + count), {
          timeoutMs: CONVERGE_MS,
          message: `dc2 stored ${count} keys of dc1`,
        });
      const first = await api1.change(page, "likes", 1, "retried-key");
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ value: 1 });
      expect(first.headers.get("idempotent-replayed")).toBeNull();
      // The key follows the like to dc2 (a retry there before it would count again).
      await waitKeys(1);
      for (const api of [api2, api1, api2]) {
        const again = await api.change(page, "likes", 1, "retried-key");
        expect(again.body).toEqual(first.body);
        expect(again.headers.get("idempotent-replayed")).toBe("true");
      }

      // The batch API's ids are idempotency keys too, and travel the same way.
      const item = [{ page, counter: "likes", change: 1, id: "retried-id" }];
      const results: boolean[] = [];
      for (const api of [api1, api2, api1, api2]) {
        const res = await api.batch(item);
        expect(res.status).toBe(200);
        const [result] = res.body.results;
        expect(result).not.toHaveProperty("error");
        results.push((result as { duplicate: boolean }).duplicate);
        if (results.length === 1) await waitKeys(2);
      }
      expect(results, "duplicate: dc1, dc2, dc1 again, dc2 again").toEqual([false, true, true, true]);

      for (const dc of [dc1, dc2])
        await eventually(async () => expect((await totals(dc, page)).counters).toEqual({ likes: 2 }), {
          timeoutMs: CONVERGE_MS,
          message: `${dc.name} shows each like once`,
        });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "multi-dc - a cut shorter than the DC lease: the other DC's viewers never leave the totals, and a like and a viewer added during the cut arrive through the gap's anti-entropy within the heal goal",
    async () => {
      logsOnFailure();
      const pages = ["gap-0", "gap-1"];
      const [api1, api2] = [publisherOf(dc1), publisherOf(dc2)];
      for (const page of pages) {
        await crowd.seat(dc1.gateways[0]!.wsUrl, page, `${page}-dc1`, 2);
        await crowd.seat(dc2.gateways[0]!.wsUrl, page, `${page}-dc2`, 3);
        expect((await api1.change(page, "likes", 2, `${page}-dc1-likes`)).status).toBe(200);
        expect((await api2.change(page, "likes", 1, `${page}-dc2-likes`)).status).toBe(200);
      }
      const watchers = new Map<string, TestClient>();
      for (const dc of [dc1, dc2]) watchers.set(dc.name, await crowd.watcher(dc.gateways[0]!.wsUrl, pages));
      let want = { viewers: 5, likes: 3 };
      const shows = (
        v: { viewers: number; counters: Readonly<Record<string, number>> } | undefined,
      ): boolean => v !== undefined && v.viewers === want.viewers && v.counters.likes === want.likes;
      const expectShown = async (dc: TestDc): Promise<void> => {
        for (const page of pages) {
          const frame = watchers.get(dc.name)!.lastCount(page);
          if (!shows(frame)) throw new Error(`${dc.name} watcher of ${page}: ${JSON.stringify(frame)}`);
          const read = await totals(dc, page);
          if (!shows(read)) throw new Error(`${dc.name} read of ${page}: ${JSON.stringify(read)}`);
        }
      };
      for (const dc of [dc1, dc2]) await eventually(() => expectShown(dc), { timeoutMs: CONVERGE_MS });

      // Nothing but the gap may trigger a comparison: no follow-up of an earlier one is pending.
      await sleep(heardAt + FOLLOW_UPS_MS - Date.now());
      const logFrom = new Map(multi.dcs.flatMap((dc) => dc.counters.map((c) => [c.nodeId, c.log().length])));
      // dc1's reads all along: the viewers dc2 had at the cut never leave them.
      const reads = startEvery(SAMPLE_MS, async () => ({
        at: Date.now(),
        body: await totals(dc1, pages[0]!),
      }));
      const cutAt = Date.now();
      multi.cut();
      // dc2 changes during the cut; the real-time updates of it are lost on the cut link.
      const [changed] = pages;
      expect((await api2.change(changed!, "likes", 1, "during-the-cut")).status).toBe(200);
      await crowd.join(dc2.gateways[0]!.wsUrl, changed!, "joined-during-the-cut");
      await eventually(
        async () => expect(await totals(dc2, changed!)).toMatchObject({ viewers: 6, counters: { likes: 4 } }),
        { timeoutMs: CUT_MS, intervalMs: 20, message: "dc2 counts its own changes during the cut" },
      );
      await sleep(cutAt + CUT_MS - Date.now());
      // dc1 has not heard of them, and still counts dc2's viewers: dc2 is not down, only silent.
      expect(await totals(dc1, changed!)).toMatchObject({ viewers: 5, counters: { likes: 3 }, dcs: ALL });

      const linkedAt = await healAndWaitLinked();
      const healedAt = Date.now();
      const final = (page: string): { viewers: number; likes: number } =>
        page === changed ? { viewers: 6, likes: 4 } : { viewers: 5, likes: 3 };
      await eventually(
        async () => {
          for (const dc of [dc1, dc2])
            for (const page of pages) {
              want = final(page);
              const frame = watchers.get(dc.name)!.lastCount(page);
              if (!shows(frame)) throw new Error(`${dc.name} watcher of ${page}: ${JSON.stringify(frame)}`);
              const read = await totals(dc, page);
              if (!shows(read)) throw new Error(`${dc.name} read of ${page}: ${JSON.stringify(read)}`);
            }
        },
        { timeoutMs: CONVERGE_MS, intervalMs: 20, message: "both DCs show the changes made during the cut" },
      );
      const convergedAt = Date.now();
      const sampled = await reads.stop();
      const report = {
        cutMs: healedAt - cutAt,
        linkedToConvergedMs: convergedAt - linkedAt,
        readsOfDc1: sampled.length,
      };
      console.info(`multi-dc gap: ${JSON.stringify(report)}`);

      // No dip: from the cut on, every frame and every read in dc1 counted dc2, and vice versa.
      for (const [name, watcher] of watchers)
        for (const r of watcher.received) {
          if (r.at < cutAt || r.frame.type !== "count" || !pages.includes(r.frame.page)) continue;
          const frame: CountFrame = r.frame;
          expect(frame.dcs, `${name} frame at +${r.at - cutAt} ms`).toEqual(ALL);
          expect(frame.viewers, `${name} frame at +${r.at - cutAt} ms`).toBeGreaterThanOrEqual(5);
        }
      for (const { at, body } of sampled) {
        expect(body.dcs, `dc1 read at +${at - cutAt} ms`).toEqual(ALL);
        expect(body.viewers, `dc1 read at +${at - cutAt} ms`).toBeGreaterThanOrEqual(5);
      }
      // The lost update came back by comparing digests after a gap, not after the DC was down.
      const logs = multi.dcs.flatMap((dc) => dc.counters.map((c) => c.log().slice(logFrom.get(c.nodeId))));
      expect(logs.join("\n"), "a gap was noticed").toContain("heartbeats from data center lost");
      expect(logs.join("\n"), "no DC was taken for down").not.toContain("data center down");
      expect(convergedAt - linkedAt).toBeLessThanOrEqual(HEAL_CONVERGENCE_GOAL_MS + SLACK_MS);
      expect(DC_TIMINGS.antiEntropyMs, "periodic anti-entropy cannot have done it").toBeGreaterThan(
        TEST_TIMEOUT_MS,
      );
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "multi-dc - a delete and a reset in dc1 concurrent with increments in dc2: after the heal both DCs show the increments counted from zero (add-wins), and a delete nothing raced stays hidden",
    async () => {
      logsOnFailure();
      const page = "tombstones";
      const [api1, api2] = [publisherOf(dc1), publisherOf(dc2)];
      const seed = async (api: typeof api1, dc: string, changes: Record<string, number>): Promise<void> => {
        const items = Object.entries(changes).map(([counter, change]) => ({
          page,
          counter,
          change,
          id: `seed-${dc}-${counter}`,
        }));
        const res = await api.batch(items);
        expect(res.status).toBe(200);
        expect(res.body.results.filter((r) => "error" in r)).toEqual([]);
      };
      await seed(api1, "dc1", { likes: 5, shares: 2, unread: 4 });
      await seed(api2, "dc2", { likes: 3, unread: 1 });
      const watchers = new Map<string, TestClient>();
      for (const dc of [dc1, dc2]) watchers.set(dc.name, await crowd.watcher(dc.gateways[0]!.wsUrl, [page]));
      const before = { likes: 8, shares: 2, unread: 5 };
      for (const dc of [dc1, dc2])
        await eventually(async () => expect((await totals(dc, page)).counters).toEqual(before), {
          timeoutMs: CONVERGE_MS,
        });

      multi.cut();
      // dc1 deletes and resets what it observes; dc2, not hearing of it, keeps incrementing.
      const deleted = await api1.remove(page, "likes", { idempotencyKey: "delete-likes" });
      expect(deleted.body).toMatchObject({ previous: 8, deleted: true, value: 0 });
      const deletedShares = await api1.remove(page, "shares", { idempotencyKey: "delete-shares" });
      expect(deletedShares.body).toMatchObject({ previous: 2, deleted: true });
      const reset = await api1.reset(page, "unread", { idempotencyKey: "reset-unread" });
      expect(reset.body).toMatchObject({ previous: 5, value: 0 });
      expect(
        (
          await api2.batch([
            { page, counter: "likes", change: 2, id: "concurrent-likes" },
            { page, counter: "unread", change: 3, id: "concurrent-unread" },
          ])
        ).status,
      ).toBe(200);
      expect((await totals(dc1, page)).counters).toEqual({ unread: 0 });
      expect((await totals(dc2, page)).counters).toEqual({ likes: 10, shares: 2, unread: 8 });

      await sleep(CUT_MS);
      await healAndWaitLinked();
      // Add-wins: the increments dc1's delete and reset did not see survive, counted from zero; the
      // counter nobody touched meanwhile stays deleted.
      const after = { likes: 2, unread: 3 };
      for (const dc of [dc1, dc2])
        await eventually(
          async () => {
            expect((await totals(dc, page)).counters).toEqual(after);
            expect(watchers.get(dc.name)!.lastCount(page)?.counters).toEqual(after);
          },
          { timeoutMs: CONVERGE_MS, intervalMs: 20, message: `${dc.name} after the heal` },
        );
      // The same entries on both sides: converged, not merely equal sums.
      const raw = await Promise.all(
        [dc1, dc2].map(async (dc) => {
          const res = await publisherOf(dc).read<{ pages: Array<{ counters: unknown }> }>(
            `page=${page}&raw=true`,
          );
          return res.body.pages[0]!.counters;
        }),
      );
      expect(raw[0]).toEqual(raw[1]);
      // The deleted counter counts from zero again on the next change, anywhere.
      expect((await api1.change(page, "shares", 1, "shares-again")).body).toMatchObject({ value: 1 });
      for (const dc of [dc1, dc2])
        await eventually(
          async () => expect((await totals(dc, page)).counters).toEqual({ ...after, shares: 1 }),
          { timeoutMs: CONVERGE_MS },
        );
    },
    TEST_TIMEOUT_MS,
  );
  // A DC whose own NATS falls silent cannot tell whether the other DCs are there: their viewers stay
  // in its totals while it hears nothing at all, and the other DC's view of it is the usual one.
  test(
    "multi-dc - dc1's NATS frozen past the DC lease: dc1 never shows dc2's viewers leaving, and both DCs are exact after the thaw",
    async () => {
      logsOnFailure();
      const page = "frozen-nats";
      await crowd.seat(dc1.gateways[0]!.wsUrl, page, `${page}-dc1`, 2);
      await crowd.seat(dc2.gateways[0]!.wsUrl, page, `${page}-dc2`, 3);
      const watcher = await crowd.watcher(dc1.gateways[0]!.wsUrl, [page]);
      await eventually(() => expect(watcher.lastCount(page)).toMatchObject({ viewers: 5, dcs: ALL }), {
        timeoutMs: CONVERGE_MS,
      });
      const logFrom = new Map(dc1.counters.map((c) => [c.nodeId, c.log().length]));
      const frozenAt = Date.now();
      await dc1.nats.pause();
      await sleep(DC_LEASE_MS + FREEZE_PAST_LEASE_MS);
      // dc2 really cannot hear dc1: dc1's viewers have left its totals, as for a cut link.
      expect(await totals(dc2, page)).toMatchObject({ viewers: 3, dcs: ["dc2"] });
      await dc1.nats.resume();
      const thawedAt = Date.now();
      await multi.waitLinked();
      heardAt = Date.now();
      for (const dc of [dc1, dc2])
        await eventually(async () => expect(await totals(dc, page)).toMatchObject({ viewers: 5, dcs: ALL }), {
          timeoutMs: CONVERGE_MS,
          message: `${dc.name} exact after the thaw`,
        });
      const frames = watcher.received.filter(
        (r) => r.at >= frozenAt && r.frame.type === "count" && r.frame.page === page,
      );
      console.info(
        `multi-dc frozen NATS: ${JSON.stringify({ frozenMs: thawedAt - frozenAt, dc1FramesSince: frames.length })}`,
      );
      for (const r of frames) {
        const frame = r.frame as CountFrame;
        expect(frame.dcs, `dc1 frame at +${r.at - frozenAt} ms`).toEqual(ALL);
        expect(frame.viewers, `dc1 frame at +${r.at - frozenAt} ms`).toBeGreaterThanOrEqual(5);
      }
      // Neither did dc1's counter node take dc2 for down (its DC liveness drives anti-entropy and
      // webhooks).
      for (const c of dc1.counters)
        expect(c.log().slice(logFrom.get(c.nodeId)), `${c.nodeId}'s log`).not.toContain("data center down");
      // The watcher is live: a like made in dc2 after the thaw reaches it, with both DCs counted.
      expect((await publisherOf(dc2).change(page, "likes", 1, `${page}-after-thaw`)).status).toBe(200);
      await eventually(
        () => expect(watcher.lastCount(page)).toMatchObject({ viewers: 5, dcs: ALL, counters: { likes: 1 } }),
        { timeoutMs: CONVERGE_MS, message: "dc1's watcher gets dc2's like" },
      );
    },
    TEST_TIMEOUT_MS,
  );
});
