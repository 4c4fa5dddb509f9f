/**
 * Idempotency keys across DCs where the link fails them (key_replication.ts), two DCs in one
 * process on a manual clock (test/support/dc_simulation.ts). A node that restarts on its DC's store
 * serves at once, before it hears the other DCs again: what it answers in that time reaches them
 * too, while it may still hear one (the discovery window since its start); a node that heard no
 * other DC by the end of that window, with none listed, sends none. Keys sent while the link is cut
 * are lost on the way, and so is a message the receiving node never stored: the sender holds each
 * until the other DC acknowledged it, and sends again what waited too long or what a DC that comes
 * back missed, whichever way the link heals first, however long the cut, and also when only one way
 * was cut or the sender restarted meanwhile.
 */
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation, SIM_ENV } from "../../../test/support/dc_simulation.js";

const SENT = 'livecount_counter_idempotency_keys_across_dcs_total{outcome="sent"}';
const STORED = 'livecount_counter_idempotency_keys_across_dcs_total{outcome="stored"}';
const RESENT = 'livecount_counter_idempotency_keys_across_dcs_total{outcome="resent"}';
const LOST = 'livecount_counter_idempotency_keys_across_dcs_total{outcome="lost"}';
const HELD = "livecount_counter_idempotency_keys_held";
const DC_LEASE_MS = Number(SIM_ENV.LIVECOUNT_DC_LEASE_MS);
/** Bootstrap's discovery window: 4 DC heartbeats (convergence.ts). */
const DISCOVERY_MS = 4 * Number(SIM_ENV.LIVECOUNT_DC_HEARTBEAT_MS);

let sim: DcSimulation | undefined;
/** When dc1's node was started again (clock time). */
let restartedAt = 0;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

/** dc1 and dc2 (with `dc1Env` and `dc2Env`) linked, both ready, heard by each other. */
async function linkedPair(
  dc1Env: Record<string, string> = {},
  dc2Env: Record<string, string> = {},
): Promise<DcSimulation> {
  sim = new DcSimulation();
  const s = sim;
  s.add("dc1", dc1Env);
  s.add("dc2", dc2Env);
  s.link("dc1", "dc2");
  await s.startAll(["dc1", "dc2"]);
  await s.until(() => s.dc("dc1").node!.ready && s.dc("dc2").node!.ready, "both ready");
  await s.run(1000);
  expect(await s.dc("dc1").dcUp("dc2")).toBe(true);
  return s;
}

/** dc1 and dc2 linked and heard by each other; then dc1's node restarts hearing nothing of dc2. */
async function restartedDeaf(): Promise<DcSimulation> {
  const s = await linkedPair();
  // dc2 hears dc1, and dc1 hears nothing of dc2 from now on (a one-way cut).
  s.drop = (from, to) => from === "dc2" && to === "dc1";
  await s.dc("dc1").node!.stop();
  restartedAt = s.clock.now();
  await s.dc("dc1").start();
  return s;
}

describe("counter - idempotency keys at a node's start", () => {
  test("counter - a restarted node's first answers reach the other DC before it hears any: a retry there is a replay", async () => {
    const s = await restartedDeaf();
    const [dc1, dc2] = [s.dc("dc1"), s.dc("dc2")];
    expect(await dc1.dcUp("dc2"), "dc1 has not heard dc2 since its restart").toBe(false);

    expect(await dc1.increment("early", "likes", 1, "early-1")).toBe(1);
    expect(s.clock.now() - restartedAt, "answered within the discovery window").toBeLessThan(DISCOVERY_MS);
    await s.run(1000);
    expect(await dc1.metric(SENT), "keys dc1 sent").toBe(1);
    expect(await dc2.metric(STORED), "keys dc2 stored").toBe(1);

    // The publisher's retry lands in dc2: answered as the change it repeats, counted once.
    expect(await dc2.increment("early", "likes", 1, "early-1")).toBe(1);
    expect((await dc2.entries("early")).likes?.dc2, "no entry of dc2 for the retry").toBeUndefined();
  });

  test("counter - a node that heard no other DC by the end of its discovery window sends no keys", async () => {
    const s = await restartedDeaf();
    const dc1 = s.dc("dc1");
    await s.run(DISCOVERY_MS);
    expect(await dc1.dcUp("dc2")).toBe(false);

    expect(await dc1.increment("late", "likes", 1, "late-1")).toBe(1);
    await s.run(1000);
    expect(await dc1.metric(SENT), "keys dc1 sent").toBe(0);
  });
});

/** dc1 and dc2 (with `dc1Env` and `dc2Env`) linked and heard by each other, then the link cut. */
async function cutApart(
  dc1Env: Record<string, string> = {},
  dc2Env: Record<string, string> = {},
): Promise<DcSimulation> {
  const s = await linkedPair(dc1Env, dc2Env);
  s.cut("dc1", "dc2");
  return s;
}

/** The like's retry in dc2, once its key crossed: a replay, no entry of dc2's own. */
async function replayedInDc2(s: DcSimulation, page: string): Promise<void> {
  const dc2 = s.dc("dc2");
  expect(await dc2.metric(STORED), "keys dc2 stored").toBe(1);
  expect(await dc2.increment(page, "likes", 1, `${page}-1`), "the retry in dc2").toBe(1);
  expect((await dc2.entries(page)).likes?.dc2, "no entry of dc2 for the retry").toBeUndefined();
}

/** A like answered in dc1 during the cut, the link healed after `cutMs`: retried in dc2, it is a replay. */
async function likeAcrossCut(s: DcSimulation, cutMs: number, page: string): Promise<void> {
  const [dc1, dc2] = [s.dc("dc1"), s.dc("dc2")];
  expect(await dc1.increment(page, "likes", 1, `${page}-1`)).toBe(1);
  await s.run(cutMs);
  expect(await dc2.metric(STORED), "nothing crosses a cut link").toBe(0);
  s.link("dc1", "dc2");
  await s.run(2000);
  expect(await dc1.metric(RESENT), "keys dc1 sent again").toBeGreaterThanOrEqual(1);
  await replayedInDc2(s, page);
}

describe("counter - idempotency keys across a cut of the link", () => {
  test("counter - a cut shorter than the DC lease: keys sent meanwhile go again at the gap in heartbeats", async () => {
    const s = await cutApart();
    await likeAcrossCut(s, DC_LEASE_MS / 2, "short-cut");
    expect(await s.dc("dc1").dcUp("dc2"), "dc2 never went down").toBe(true);
  });

  test("counter - a cut past the DC lease: keys sent meanwhile go again once the other DC is up", async () => {
    const s = await cutApart();
    await likeAcrossCut(s, DC_LEASE_MS * 2, "long-cut");
  });

  test("counter - the other DC's lease is longer: a cut between the two leases, unseen as down here, still resends", async () => {
    // dc1 finds dc2 down only after the lease dc2 announces: until then, the cut is a gap at the heal.
    const s = await cutApart({}, { LIVECOUNT_DC_LEASE_MS: String(DC_LEASE_MS * 4) });
    await likeAcrossCut(s, DC_LEASE_MS * 2, "longer-lease");
    expect(await s.dc("dc1").dcUp("dc2"), "dc2 never went down for dc1").toBe(true);
  });

  test("counter - a link that heals one way first: the DC that hears again asks, and the keys cross once they can", async () => {
    const s = await cutApart();
    const [dc1, dc2] = [s.dc("dc1"), s.dc("dc2")];
    expect(await dc1.increment("one-way", "likes", 1, "one-way-1")).toBe(1);
    await s.run(DC_LEASE_MS / 2);
    // dc2 -> dc1 carries again, dc1 -> dc2 not yet: dc1 hears dc2 and sends its keys into the void.
    s.drop = (from, to) => from === "dc1" && to === "dc2";
    s.link("dc1", "dc2");
    await s.run(2000);
    expect(await dc1.metric(RESENT), "dc1 sent its keys again at the gap").toBeGreaterThanOrEqual(1);
    expect(await dc2.metric(STORED), "lost on the way").toBe(0);
    // dc1 -> dc2 back: dc2 hears dc1 again and asks it; dc1's keys cross now.
    s.drop = undefined;
    await s.run(2000);
    await replayedInDc2(s, "one-way");
  });

  test("counter - at LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS the oldest keys held for a down DC go, counted lost", async () => {
    const s = await cutApart({ LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS: "1" });
    const [dc1, dc2] = [s.dc("dc1"), s.dc("dc2")];
    await s.run(DC_LEASE_MS * 2);
    expect(await dc1.dcUp("dc2"), "dc2 down for dc1").toBe(false);
    expect(await dc1.increment("first", "likes", 1, "first-1")).toBe(1);
    expect(await dc1.increment("second", "likes", 1, "second-1")).toBe(1);
    expect(await dc1.metric(LOST), "the first key, past the cap of one").toBe(1);
    s.link("dc1", "dc2");
    await s.run(2000);
    expect(
      await dc1.metric(RESENT),
      "the one key held, when dc1 heard dc2 (acknowledged before dc2 asked)",
    ).toBe(1);
    expect(await dc2.metric(STORED), "only the second crossed").toBe(1);
    expect(await dc2.increment("second", "likes", 1, "second-1"), "its retry, a replay").toBe(1);
    expect((await dc2.entries("second")).likes?.dc2).toBeUndefined();
  });
});

describe("counter - idempotency keys held until the other DC acknowledged them", () => {
  test("counter - a cut past the lease healing one way, the other a second later: the keys cross then", async () => {
    const s = await cutApart();
    const dc1 = s.dc("dc1");
    expect(await dc1.increment("late-way", "likes", 1, "late-way-1")).toBe(1);
    await s.run(DC_LEASE_MS * 4);
    expect(await dc1.dcUp("dc2"), "dc2 down for dc1").toBe(false);
    // dc2 -> dc1 first: dc1 hears dc2 again and sends its keys into the way still cut.
    s.drop = (from, to) => from === "dc1" && to === "dc2";
    s.link("dc1", "dc2");
    await s.run(1000);
    s.drop = undefined;
    await s.run(2000);
    await replayedInDc2(s, "late-way");
  });

  test("counter - a cut of one way only (dc1 -> dc2) past the lease, dc1 hearing dc2 throughout: the keys cross at the heal", async () => {
    const s = await linkedPair();
    const dc1 = s.dc("dc1");
    s.drop = (from, to) => from === "dc1" && to === "dc2";
    expect(await dc1.increment("one-way-long", "likes", 1, "one-way-long-1")).toBe(1);
    await s.run(DC_LEASE_MS * 4);
    expect(await dc1.dcUp("dc2"), "dc1 hears dc2 all along").toBe(true);
    expect(await s.dc("dc2").dcUp("dc1"), "dc2 does not hear dc1").toBe(false);
    s.drop = undefined;
    await s.run(2000);
    await replayedInDc2(s, "one-way-long");
  });

  test("counter - a node restarted during a cut, its peers listed: what it answers after the restart crosses at the heal", async () => {
    const s = await cutApart({ LIVECOUNT_PEER_DCS: "dc2" }, { LIVECOUNT_PEER_DCS: "dc1" });
    const dc1 = s.dc("dc1");
    await s.run(DC_LEASE_MS * 2);
    await dc1.node!.stop();
    await dc1.start();
    await s.run(DISCOVERY_MS);
    expect(await dc1.increment("restarted", "likes", 1, "restarted-1")).toBe(1);
    await s.run(DC_LEASE_MS * 4);
    s.link("dc1", "dc2");
    await s.run(2000);
    await replayedInDc2(s, "restarted");
  });

  test("counter - a keys message lost with no heartbeat lost (a receiving node gone with it in hand): sent again until acknowledged", async () => {
    const s = await linkedPair();
    const dc1 = s.dc("dc1");
    let dropped = 0;
    s.drop = (from, _to, subject) => from === "dc1" && subject.startsWith("lc.keys.") && dropped++ === 0;
    expect(await dc1.increment("lost-once", "likes", 1, "lost-once-1")).toBe(1);
    await s.run(1000);
    expect(dropped, "the message dropped, nothing else").toBe(1);
    expect(await dc1.dcUp("dc2")).toBe(true);
    await s.run(8 * Number(SIM_ENV.LIVECOUNT_DC_HEARTBEAT_MS));
    expect(await dc1.metric(RESENT)).toBe(1);
    await replayedInDc2(s, "lost-once");
    expect(await dc1.metric(HELD), "acknowledged: let go").toBe(0);
  });

  test("counter - the other DC's only node stopping (out of the keys group while it hands over): what it missed is stored when it is back", async () => {
    const s = await linkedPair();
    const [dc1, dc2] = [s.dc("dc1"), s.dc("dc2")];
    // Its handover takes 2 s (a slow Redis): it heartbeats on, out of the keys' queue group.
    const release = dc2.store.release.bind(dc2.store);
    dc2.store.release = async (...args) => {
      await new Promise<void>((resolve) => s.clock.setTimeout(resolve, 2000));
      return release(...args);
    };
    const stopping = dc2.node!.stop();
    await s.run(500);
    expect(await dc1.increment("handover", "likes", 1, "handover-1")).toBe(1);
    await s.run(2500);
    await stopping;
    dc2.store.release = release;
    expect(await dc1.metric(HELD), "not acknowledged: held").toBe(1);
    await dc2.start();
    await s.run(20_000);
    await replayedInDc2(s, "handover");
  });
});
