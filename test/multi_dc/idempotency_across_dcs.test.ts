/**
 * Idempotency keys across two data centers of real processes: a publisher's change retried in the
 * other DC (its answer was lost; a global name resolved elsewhere) is answered as the change it
 * repeats once the first DC's keys reached it, and counts once. Increments and resets alike; a key
 * reused for another change is a conflict there too; keys sent while the other DC's counter nodes
 * hand partitions over (a deploy) are stored all the same, and so are keys sent while the link was
 * cut, once it heals (whichever way first).
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { CLUSTER_PUBLISHER_KEY } from "../support/cluster.js";
import { CONVERGE_MS } from "../support/dc_pages.js";
import { eventually, sleep } from "../support/eventually.js";
import { MultiDc, type TestDc } from "../support/multi_dc.js";
import { PublisherHttp, type HttpAnswer, type PageRaw } from "../support/publisher_http.js";
import { describeWithServers } from "../support/servers.js";

const TEST_TIMEOUT_MS = 90_000;

interface Answer {
  readonly value: number;
  readonly previous?: number;
  readonly updated_at: number;
}

/** Waits until `dc` stored `count` keys of the other DC, so a retry there finds them. */
async function waitKeys(dc: TestDc, count: number): Promise<void> {
  await eventually(async () => expect(await dc.keysStored()).toBeGreaterThanOrEqual(count), {
    timeoutMs: CONVERGE_MS,
    message: `${dc.name} stored ${count} keys of the other DC`,
  });
}

/** Waits until each DC's likes over `pages` add up to `likes`. */
async function totalsReach(
  dcs: readonly PublisherHttp[],
  pages: readonly string[],
  likes: number,
): Promise<void> {
  for (const p of dcs)
    await eventually(
      async () => {
        let sum = 0;
        for (const page of pages) sum += (await p.counters(page)).likes ?? 0;
        expect(sum).toBe(likes);
      },
      { timeoutMs: CONVERGE_MS },
    );
}

describeWithServers("multi-dc - idempotency keys across data centers", () => {
  let multi: MultiDc;
  beforeAll(async () => {
    multi = await MultiDc.start();
    // A DC sends keys once it has heard another (or LIVECOUNT_PEER_DCS names one).
    await Promise.all([multi.dc("dc1").waitHeard("dc2"), multi.dc("dc2").waitHeard("dc1")]);
  }, TEST_TIMEOUT_MS);
  afterAll(async () => {
    await multi?.stop();
  });

  test(
    "a change retried in the other DC is answered as the one it repeats and counts once; a reset too",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      const one = new PublisherHttp(dc1.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const two = new PublisherHttp(dc2.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const page = "retried-elsewhere";
      const likes = async (p: PublisherHttp): Promise<number> => (await p.counters(page)).likes ?? 0;

      const first = (await one.change(page, "likes", 1, "like-1")) as HttpAnswer<Answer>;
      expect(first.status).toBe(200);
      await waitKeys(dc2, 1);
      const retried = (await two.change(page, "likes", 1, "like-1")) as HttpAnswer<Answer>;
      expect(retried.status).toBe(200);
      expect(retried.headers.get("idempotent-replayed")).toBe("true");
      expect(retried.body).toMatchObject({ value: 1, updated_at: first.body.updated_at });
      // Counted in dc2, the retry would be an entry of dc2's own, for good: there is only dc1's.
      await eventually(
        async () => {
          const raw = await two.read(`page=${page}&raw=true`);
          expect((raw.body.pages[0] as unknown as PageRaw).counters.likes).toEqual({ dc1: { p: 1, n: 0 } });
        },
        { timeoutMs: CONVERGE_MS },
      );
      const reused = await two.change(page, "likes", 2, "like-1");
      expect(reused.status).toBe(409);
      expect(reused.body).toMatchObject({ error: { code: "idempotency_conflict" } });

      // A reset in dc2, a like in dc1 after it, then the reset's retry in dc1: it must not cancel the like.
      const reset = (await two.reset(page, "likes", { idempotencyKey: "reset-1" })) as HttpAnswer<Answer>;
      expect(reset.status).toBe(200);
      expect(reset.body).toMatchObject({ value: 0, previous: 1 });
      await waitKeys(dc1, 1);
      await eventually(async () => expect(await likes(one)).toBe(0), { timeoutMs: CONVERGE_MS });
      expect((await one.change(page, "likes", 1, "like-2")).status).toBe(200);
      const resetAgain = (await one.reset(page, "likes", {
        idempotencyKey: "reset-1",
      })) as HttpAnswer<Answer>;
      expect(resetAgain.status).toBe(200);
      expect(resetAgain.headers.get("idempotent-replayed")).toBe("true");
      expect(resetAgain.body).toMatchObject({ previous: 1, updated_at: reset.body.updated_at });
      for (const p of [one, two])
        await eventually(async () => expect(await likes(p)).toBe(1), { timeoutMs: CONVERGE_MS });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "keys sent while the other DC's counter nodes restart are stored: every retry there is a replay",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      const one = new PublisherHttp(dc1.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const two = new PublisherHttp(dc2.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const pages = Array.from({ length: 8 }, (_, i) => `deployed-${i}`);
      // Likes in dc1 all along, while each of dc2's counter nodes stops (handing its partitions over)
      // and starts again (taking its share back).
      let sent = 0;
      let restarted = false;
      const liking = (async () => {
        for (; !restarted || sent < 40; sent++) {
          const res = await one.change(pages[sent % pages.length]!, "likes", 1, `deploy-${sent}`);
          expect(res.status).toBe(200);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      for (const counter of dc2.counters) {
        await counter.terminate();
        await counter.start();
      }
      restarted = true;
      await liking;
      const LIKES = sent;
      await dc2.waitBalanced();
      // Every key is in dc2's Redis before any retry (a retry ahead of its key counts again).
      const redis = new Redis({ port: dc2.redis.port, lazyConnect: true });
      try {
        await eventually(
          async () => expect((await redis.keys("*idem:*deploy-*")).length).toBeGreaterThanOrEqual(LIKES),
          { timeoutMs: CONVERGE_MS, message: "every key of dc1's likes stored in dc2" },
        );
      } finally {
        redis.disconnect();
      }
      console.log(`${LIKES} likes in dc1 while dc2 restarted its counter nodes`);
      for (let i = 0; i < LIKES; i++) {
        const retry = await two.change(pages[i % pages.length]!, "likes", 1, `deploy-${i}`);
        expect(retry.headers.get("idempotent-replayed"), `retry of deploy-${i}`).toBe("true");
      }
      await totalsReach([one, two], pages, LIKES);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "keys sent while the link is cut past the DC lease cross once it heals, one way first: every retry in the other DC is a replay",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      const one = new PublisherHttp(dc1.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const two = new PublisherHttp(dc2.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const pages = Array.from({ length: 4 }, (_, i) => `cut-${i}`);
      const LIKES = 20;
      const storedBefore = await dc2.keysStored();
      multi.cut();
      for (let i = 0; i < LIKES; i++)
        expect((await one.change(pages[i % pages.length]!, "likes", 1, `cut-${i}`)).status).toBe(200);
      // Past the lease: each DC finds the other down.
      await Promise.all([dc1.waitDown("dc2"), dc2.waitDown("dc1")]);
      // dc2 -> dc1 first: dc1 hears dc2 again and sends its keys again, into a way still cut.
      multi.healInto("dc1");
      await dc1.waitHeard("dc2");
      await sleep(500);
      expect(await dc2.keysStored(), "nothing crossed into dc2 yet").toBe(storedBefore);
      // dc1 -> dc2 back: dc2 hears dc1 and asks its nodes for what they hold.
      multi.heal();
      await multi.waitLinked();
      await waitKeys(dc2, storedBefore + LIKES);
      for (let i = 0; i < LIKES; i++) {
        const retry = await two.change(pages[i % pages.length]!, "likes", 1, `cut-${i}`);
        expect(retry.headers.get("idempotent-replayed"), `retry of cut-${i}`).toBe("true");
      }
      await totalsReach([one, two], pages, LIKES);
    },
    TEST_TIMEOUT_MS,
  );
});
