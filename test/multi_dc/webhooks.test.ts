/**
 * Occupancy webhooks across two data centers of real processes (per DC a nats-server, a
 * redis-server, a counter node and a gateway; the link between them cut and healed by the test),
 * each DC with its own receiver: every DC's owner announces the page's total over the DCs it sees
 * live, so a DC cut off from the page's only viewers announces `page.vacated` after the DC lease,
 * and `page.occupied` again once it hears them.
 */
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { DC_TIMINGS, MultiDc } from "../support/multi_dc.js";
import { WebhookReceiver, validSignature, type HookBody } from "../support/webhook_receiver.js";
import { TestClient } from "../support/ws_client.js";
import { describeWithServers } from "../support/servers.js";

const SECRET = "multi-dc-webhook-secret-0123456789";
/** The DC lease (2 s) and the re-dial after a heal (~1 s), with room for a loaded machine. */
const WAIT_MS = 15_000;

const story = (bodies: readonly HookBody[]) => bodies.map((b) => `${b.dc} ${b.type} @${b.viewers}`);

describeWithServers("multi-dc - occupancy webhooks", () => {
  let multi: MultiDc;
  const receivers = new Map<string, WebhookReceiver>();

  beforeAll(async () => {
    for (const dc of ["dc1", "dc2"]) receivers.set(dc, await WebhookReceiver.start());
    const hooks = (dc: string) => ({
      LIVECOUNT_WEBHOOK_URL: receivers.get(dc)!.url,
      LIVECOUNT_WEBHOOK_SECRET: SECRET,
      LIVECOUNT_WEBHOOK_RETRY_MS: "50",
      LIVECOUNT_WEBHOOK_RETRY_MAX_MS: "200",
    });
    multi = await MultiDc.start({ counters: 1, dcEnv: { dc1: hooks("dc1"), dc2: hooks("dc2") } });
  }, 120_000);

  afterAll(async () => {
    await multi?.stop();
    for (const r of receivers.values()) await r.stop();
  });

  test("multi-dc - each DC announces the page's total as it sees it: a DC cut off from the only viewer vacates the page, and occupies it again after the heal", async () => {
    onTestFailed(() => console.log(multi.logs()));
    const [r1, r2] = [receivers.get("dc1")!, receivers.get("dc2")!];
    const viewer = await TestClient.connect(multi.dc("dc2").gateways[0]!.wsUrl);
    viewer.join("remote-only", "reader-1");

    await r2.waitForDelivered("remote-only", 1, WAIT_MS);
    await r1.waitForDelivered("remote-only", 1, WAIT_MS);

    multi.cut();
    const cutAt = Date.now();
    const [, vacated] = await r1.waitForDelivered("remote-only", 2, WAIT_MS);
    // Not before the DC lease ran out: dc2's last heartbeat came at most a heartbeat interval before
    // the cut, later on a loaded machine (each is armed after the previous one's work), hence the
    // slack; a vacate that followed the cut itself would come at once.
    expect(vacated!.ts - cutAt).toBeGreaterThanOrEqual(DC_TIMINGS.leaseMs - DC_TIMINGS.heartbeatMs - 500);

    multi.heal();
    await multi.waitLinked();
    await r1.waitForDelivered("remote-only", 3, WAIT_MS);

    await viewer.close();
    await r2.waitForDelivered("remote-only", 2, WAIT_MS);
    await r1.waitForDelivered("remote-only", 4, WAIT_MS);

    expect(story(r1.delivered("remote-only"))).toEqual([
      "dc1 page.occupied @1",
      "dc1 page.vacated @0",
      "dc1 page.occupied @1",
      "dc1 page.vacated @0",
    ]);
    // dc2 never lost its own viewer: the cut changed nothing it counts.
    expect(story(r2.delivered("remote-only"))).toEqual(["dc2 page.occupied @1", "dc2 page.vacated @0"]);
    for (const hook of [...r1.received, ...r2.received])
      expect(validSignature(hook.raw, hook.headers["x-livecount-signature"], SECRET)).toBe(true);
    // A receiver fed by both DCs tells their events apart by id, and their streams by `dc`.
    const delivered = [...r1.delivered(), ...r2.delivered()];
    expect(new Set(delivered.map((b) => b.id)).size).toBe(delivered.length);
  }, 90_000);
});
