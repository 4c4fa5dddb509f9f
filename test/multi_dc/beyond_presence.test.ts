/**
 * Beyond presence across two data centers of real processes (test/support/multi_dc.ts), started once
 * for the file: attention and connections (each DC counts its own sockets, both show the sum over
 * live DCs, a DC cut off drops out after its lease like its viewers, and comes back after the heal),
 * time windows (buckets replicate, and converge by anti-entropy after a cut), and the per-page cap on
 * counters, which each DC checks against what it knows.
 */
import { afterAll, beforeAll, expect, onTestFailed, onTestFinished, test } from "vitest";
import { describeWithServers } from "../support/servers.js";
import { CONVERGE_MS, publisherOf } from "../support/dc_pages.js";
import type { ErrorBody } from "../support/publisher_http.js";
import { eventually } from "../support/eventually.js";
import { MultiDc, type TestDc } from "../support/multi_dc.js";
import { TestClient } from "../support/ws_client.js";

const TEST_TIMEOUT_MS = 90_000;
/** LIVECOUNT_MAX_COUNTERS_PER_PAGE of both DCs: small, to reach it. */
const MAX_COUNTERS = 4;

interface Presence {
  readonly viewers: number;
  readonly active: number;
  readonly connections: number;
}

async function presenceOver(dc: TestDc, page: string): Promise<Presence> {
  const res = await fetch(`${dc.gateways[0]!.url}/v1/pages/${encodeURIComponent(page)}/counter`);
  expect(res.status).toBe(200);
  const { viewers, active, connections } = (await res.json()) as Presence;
  return { viewers, active, connections };
}

/** Both the DC's HTTP read and its watcher's latest count frame show `want`. */
async function expectShown(dc: TestDc, watcher: TestClient, page: string, want: Presence): Promise<void> {
  await eventually(
    async () => {
      expect(await presenceOver(dc, page)).toEqual(want);
      expect(watcher.lastCount(page)).toMatchObject(want);
    },
    { timeoutMs: CONVERGE_MS, message: `${dc.name} shows ${JSON.stringify(want)}` },
  );
}

describeWithServers("multi-dc - beyond presence", () => {
  let multi: MultiDc;
  beforeAll(async () => {
    multi = await MultiDc.start({
      counters: 1,
      env: { LIVECOUNT_MAX_COUNTERS_PER_PAGE: String(MAX_COUNTERS) },
    });
  }, TEST_TIMEOUT_MS);
  afterAll(async () => {
    await multi?.stop();
  });

  test(
    "multi-dc - active viewers and connections are summed over live DCs, drop out with a cut-off DC and come back after the heal",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      const clients: TestClient[] = [];
      onTestFinished(async () => {
        await Promise.all(clients.map((c) => c.terminate()));
      });
      const connect = async (dc: TestDc): Promise<TestClient> => {
        const client = await TestClient.connect(dc.gateways[0]!.wsUrl);
        clients.push(client);
        return client;
      };
      const page = "attention-two-dcs";
      const [watch1, watch2] = await Promise.all([connect(dc1), connect(dc2)]);
      watch1.watch(page);
      watch2.watch(page);

      // dc1: alice on a visible and a hidden tab, bob visible. dc2: carol on a hidden tab.
      const [aliceFront, aliceBack, bob, carol] = await Promise.all([
        connect(dc1),
        connect(dc1),
        connect(dc1),
        connect(dc2),
      ]);
      aliceFront.send({ type: "join", page, viewer: "alice", active: true });
      aliceBack.send({ type: "join", page, viewer: "alice", active: false });
      bob.send({ type: "join", page, viewer: "bob" });
      carol.send({ type: "join", page, viewer: "carol", active: false });
      const both = { viewers: 3, active: 2, connections: 4 };
      await expectShown(dc1, watch1, page, both);
      await expectShown(dc2, watch2, page, both);

      // Carol looks at the page: everyone is looking.
      carol.send({ type: "active", page, active: true });
      await expectShown(dc1, watch1, page, { viewers: 3, active: 3, connections: 4 });
      await expectShown(dc2, watch2, page, { viewers: 3, active: 3, connections: 4 });
      // Alice and bob look away: only carol is looking, in dc2.
      aliceFront.send({ type: "active", page, active: false });
      bob.send({ type: "active", page, active: false });
      await expectShown(dc1, watch1, page, { viewers: 3, active: 1, connections: 4 });
      await expectShown(dc2, watch2, page, { viewers: 3, active: 1, connections: 4 });

      // Cut off, each DC shows its own presence once the other's lease is over.
      multi.cut();
      await expectShown(dc1, watch1, page, { viewers: 2, active: 0, connections: 3 });
      await expectShown(dc2, watch2, page, { viewers: 1, active: 1, connections: 1 });
      // Meanwhile alice closes her hidden tab in dc1.
      await aliceBack.close();
      await expectShown(dc1, watch1, page, { viewers: 2, active: 0, connections: 2 });

      multi.heal();
      await multi.waitLinked();
      const healed = { viewers: 3, active: 1, connections: 3 };
      await expectShown(dc1, watch1, page, healed);
      await expectShown(dc2, watch2, page, healed);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "multi-dc - a window sums the changes of both DCs, and a cut's changes arrive by anti-entropy after the heal",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      await multi.waitLinked();
      const page = "window-two-dcs";
      await like(dc1, page, 3, "w1");
      await like(dc2, page, -1, "w2");
      await like(dc2, page, 5, "w3");
      for (const dc of [dc1, dc2]) await expectWindow(dc, page, 7);
      // Cut off, dc2's changes stay in dc2; after the heal anti-entropy brings its buckets over.
      multi.cut();
      await like(dc2, page, 4, "w4");
      await expectWindow(dc2, page, 11);
      await expectWindow(dc1, page, 7);
      multi.heal();
      await multi.waitLinked();
      for (const dc of [dc1, dc2]) await expectWindow(dc, page, 11);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "multi-dc - counters made in both DCs during a cut may pass the per-page cap, by at most the cap per DC; then both refuse new ones",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      await multi.waitLinked();
      const page = "cap-two-dcs";
      // Cut off, each DC knows only its own counters: each takes the cap's worth.
      multi.cut();
      for (let i = 0; i < MAX_COUNTERS; i++) {
        expect(await change(dc1, page, 1, `cap-a${i}`, `a${i}`)).toEqual({ status: 200 });
        expect(await change(dc2, page, 1, `cap-b${i}`, `b${i}`)).toEqual({ status: 200 });
      }
      expect(await change(dc1, page, 1, "cap-a-past", "a-past")).toEqual({
        status: 400,
        error: "invalid_counter",
      });
      multi.heal();
      await multi.waitLinked();
      const all = Object.fromEntries(
        Array.from({ length: MAX_COUNTERS }, (_, i) => [
          [`a${i}`, 1],
          [`b${i}`, 1],
        ]).flat(),
      );
      for (const dc of [dc1, dc2])
        await eventually(
          async () => {
            const res = await fetch(`${dc.gateways[0]!.url}/v1/pages/${page}/counter`);
            expect(((await res.json()) as { counters: Record<string, number> }).counters).toEqual(all);
          },
          { timeoutMs: CONVERGE_MS, message: `${dc.name} holds both DCs' counters` },
        );
      // Twice the cap, and no more: a new counter is refused in either DC, the others still count.
      expect(await change(dc1, page, 1, "cap-c1", "c")).toEqual({ status: 400, error: "invalid_counter" });
      expect(await change(dc2, page, 1, "cap-c2", "c")).toEqual({ status: 400, error: "invalid_counter" });
      expect(await change(dc2, page, 1, "cap-a0-again", "a0")).toEqual({ status: 200 });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "multi-dc - unique visitors are counted once over both DCs, and each DC keeps the peak it showed",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      await multi.waitLinked();
      const page = "stats-two-dcs";
      const clients: TestClient[] = [];
      onTestFinished(async () => {
        await Promise.all(clients.map((c) => c.terminate()));
      });
      // u3 views from both DCs: two viewers (one per DC), one visitor.
      for (const [dc, viewers] of [
        [dc1, ["u1", "u2", "u3"]],
        [dc2, ["u3", "u4", "u5"]],
      ] as const) {
        for (const viewer of viewers) {
          const client = await TestClient.connect(dc.gateways[0]!.wsUrl);
          clients.push(client);
          client.send({ type: "join", page, viewer });
        }
      }
      for (const dc of [dc1, dc2]) {
        await eventually(
          async () => {
            const res = await fetch(`${dc.gateways[0]!.url}/v1/pages/${page}/stats`);
            expect(await res.json()).toMatchObject({
              viewers: 6,
              peak_viewers: { "1h": 6, "24h": 6 },
              unique_visitors: { "24h": 5 },
            });
          },
          { timeoutMs: CONVERGE_MS, message: `${dc.name} stats of ${page}` },
        );
      }
      // Everyone leaves: the peaks each DC showed stay, and so do the visitors.
      await Promise.all(clients.map((c) => c.close()));
      for (const dc of [dc1, dc2]) {
        await eventually(
          async () => {
            const res = await fetch(`${dc.gateways[0]!.url}/v1/pages/${page}/stats`);
            expect(await res.json()).toMatchObject({
              viewers: 0,
              peak_viewers: { "1h": 6, "24h": 6 },
              unique_visitors: { "24h": 5 },
            });
          },
          { timeoutMs: CONVERGE_MS, message: `${dc.name} stats of ${page} after everyone left` },
        );
      }
    },
    TEST_TIMEOUT_MS,
  );
});

/** A change of `counter` on `page` through the DC's gateway: the answer's status and error code. */
async function change(
  dc: TestDc,
  page: string,
  by: number,
  key: string,
  counter = "likes",
): Promise<{ status: number; error?: string }> {
  const { status, body } = await publisherOf(dc).change(page, counter, by, key);
  const error = (body as Partial<ErrorBody>).error?.code;
  return { status, ...(error !== undefined ? { error } : {}) };
}

async function like(dc: TestDc, page: string, by: number, key: string): Promise<void> {
  expect(await change(dc, page, by, key)).toEqual({ status: 200 });
}

/** The DC's hour window of `likes` on `page` comes to `want`. */
async function expectWindow(dc: TestDc, page: string, want: number): Promise<void> {
  await eventually(
    async () => {
      const res = await fetch(
        `${dc.gateways[0]!.url}/v1/pages/${encodeURIComponent(page)}/counters/likes/window?seconds=3600`,
      );
      expect(res.status).toBe(200);
      expect(((await res.json()) as { value: number }).value).toBe(want);
    },
    { timeoutMs: CONVERGE_MS, message: `${dc.name}: window of ${page} is ${want}` },
  );
}
