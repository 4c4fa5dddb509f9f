/**
 * What a counter node holds of the idempotency keys it sent (held_keys.ts), on a manual clock: until
 * every DC held for (peers, and DCs heard) acknowledged them, sent again when an acknowledgement is
 * late or a DC shows it missed them; for DCs that do not acknowledge, `keepMs` while up and until
 * back while down; never past the keys' TTL nor `maxKeys` (LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS).
 */
import type { KeysTaken } from "@livecount/cluster";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { HeldKeys, RESEND_BUDGET_KEYS, RESEND_WINDOW_KEYS, type SentKeys } from "../src/held_keys.js";

const KEEP_MS = 6_000;
const TTL_MS = 600_000;
const ACK_WAIT_MS = 2_000;

function sent(name: string, keys = 1): SentKeys {
  return { subject: `lc.keys.dc1.${name}`, data: new TextEncoder().encode(name), keys };
}

function setUp(options: { maxKeys?: number; peers?: string[] } = {}) {
  const clock = new ManualClock();
  const keep = { ms: KEEP_MS };
  const discovery = { on: false };
  /** What each DC's nodes do with keys; "acks" unless set. */
  const taken = new Map<string, KeysTaken>();
  const held = new HeldKeys({
    clock,
    peers: options.peers ?? [],
    keysTaken: (dc) => taken.get(dc) ?? "acks",
    discovering: () => discovery.on,
    ackWaitMs: ACK_WAIT_MS,
    keepMs: () => keep.ms,
    ttlMs: TTL_MS,
    maxKeys: options.maxKeys ?? 100,
  });
  let seq = 0;
  const add = (message: string | SentKeys, keys = 1): number =>
    held.add(typeof message === "string" ? sent(message, keys) : message, ++seq);
  return { clock, held, keep, taken, add, discovery };
}

const subjects = (list: readonly SentKeys[]): string[] =>
  list.map((s) => s.subject.slice("lc.keys.dc1.".length));

describe("counter - keys held until every DC acknowledged them", () => {
  test("counter - a message is let go once every DC held for acknowledged it; held is a copy", async () => {
    const { held, add } = setUp({ peers: ["dc2"] });
    held.missedBy("dc3");
    const first = sent("a");
    add(first);
    first.data.fill(0);
    add("b", 3);
    add("c");
    expect(held.keys).toBe(5);
    // dc3 asks: all three go again, a as it was sent, though the sender's buffer changed since.
    expect(new TextDecoder().decode(held.missedBy("dc3")[0]!.data), "a copy, not the sender's buffer").toBe(
      "a",
    );
    held.acked("dc2", [1, 2, 3]);
    expect(held.keys, "dc3 acknowledged none").toBe(5);
    held.acked("dc3", [2]);
    expect(held.keys, "b acknowledged by both, but a, held first, not yet").toBe(5);
    held.acked("dc3", [1, 99]);
    expect(held.keys, "a and b let go; a number not held changes nothing").toBe(1);
  });

  test("counter - what waits past ackWaitMs for a live DC goes again, each try waiting twice as long, up to 16 times", async () => {
    const { clock, held, add } = setUp({ peers: ["dc2"] });
    held.missedBy("dc2");
    add("a");
    await clock.advance(ACK_WAIT_MS - 1);
    expect(held.due()).toEqual([]);
    await clock.advance(1);
    expect(subjects(held.due())).toEqual(["a"]);
    const waits: number[] = [];
    let waited = 0;
    while (waits.length < 6 && waited < 100 * ACK_WAIT_MS) {
      await clock.advance(ACK_WAIT_MS);
      waited += ACK_WAIT_MS;
      if (held.due().length > 0) {
        waits.push(waited);
        waited = 0;
      }
    }
    expect(waits, "2, 4, 8, 16 and then 16 times ackWaitMs").toEqual(
      [2, 4, 8, 16, 16, 16].map((n) => n * ACK_WAIT_MS),
    );
    // Down: nothing goes to it; up again, what it did not acknowledge goes at once.
    held.down("dc2");
    await clock.advance(40 * ACK_WAIT_MS);
    expect(held.due()).toEqual([]);
    expect(subjects(held.missedBy("dc2"))).toEqual(["a"]);
    held.acked("dc2", [1]);
    expect(held.keys).toBe(0);
  });

  test("counter - a DC that shows it missed some gets what it did not acknowledge, at most RESEND_BUDGET_KEYS at once", async () => {
    const { clock, held, add } = setUp({ maxKeys: 4 * RESEND_BUDGET_KEYS });
    held.missedBy("dc2");
    for (let i = 0; i < 4; i++) add(`m${i}`, RESEND_BUDGET_KEYS / 2);
    held.acked("dc2", [2]);
    expect(subjects(held.missedBy("dc2")), "m1 acknowledged; m3 past the budget").toEqual(["m0", "m2"]);
    await clock.advance(ACK_WAIT_MS);
    expect(subjects(held.due()), "m3 once it waited; m0 and m2 wait twice as long now").toEqual(["m3"]);
  });

  test("counter - everything owed to a DC goes, a budget at a time: to one that does not acknowledge, all it holds", async () => {
    const { held, taken, add } = setUp({ maxKeys: 10 * RESEND_BUDGET_KEYS });
    taken.set("old", "unknown");
    held.missedBy("old");
    for (let i = 0; i < 12; i++) add(`m${i}`, RESEND_BUDGET_KEYS / 2);
    const sentAgain: string[] = [];
    sentAgain.push(...subjects(held.missedBy("old")));
    expect(sentAgain).toEqual(["m0", "m1"]);
    for (let call = 0; call < 10; call++) sentAgain.push(...subjects(held.due()));
    expect(sentAgain, "each once, in order, the rest at the next calls").toEqual(
      Array.from({ length: 12 }, (_, i) => `m${i}`),
    );
    // An acknowledgement from a DC not held for changes nothing, not even whether it is up.
    held.acked("dc9", [1, 2, 3]);
    expect(held.knows("dc9")).toBe(false);
    // The node stops: a DC that does not acknowledge cannot say what it lacks.
    expect(held.release()).toBe(0);
    expect(held.keys).toBe(0);
  });

  test("counter - a DC that does not acknowledge: held keepMs while up, until back while down, its missedBy all", async () => {
    const { clock, held, keep, taken, add } = setUp();
    taken.set("old", "unknown");
    held.missedBy("old");
    add("a");
    await clock.advance(KEEP_MS / 2);
    add("b");
    await clock.advance(KEEP_MS / 2 + 1);
    // keepMs is asked at each expiry: a longer DC lease heard since keeps a, older than keepMs.
    keep.ms = 3 * KEEP_MS;
    add("c");
    expect(held.keys).toBe(3);
    keep.ms = KEEP_MS;
    add("d");
    expect(held.due(), "nothing waits for its acknowledgement").toEqual([]);
    expect(subjects(held.missedBy("old")), "all it holds, to send again").toEqual(["b", "c", "d"]);
    held.down("old");
    await clock.advance(KEEP_MS * 3);
    add("e");
    expect(held.keys, "held while down").toBe(4);
    expect(subjects(held.missedBy("old")), "back up: everything").toEqual(["b", "c", "d", "e"]);
    await clock.advance(KEEP_MS + 1);
    add("f");
    expect(subjects(held.missedBy("old"))).toEqual(["f"]);
    // A DC whose nodes take no keys is not held for.
    taken.set("old", "off");
    add("g");
    expect(held.keys).toBe(0);
  });

  test("counter - a peer never heard, or a DC down, is held for until it acknowledges, or for the keys' TTL", async () => {
    const { clock, held, add } = setUp({ peers: ["dc2"] });
    expect(held.knows("dc2")).toBe(true);
    expect(held.knows("dc9")).toBe(false);
    add("a");
    await clock.advance(TTL_MS / 2);
    expect(held.due(), "nothing goes to a DC never heard").toEqual([]);
    expect(held.keys).toBe(1);
    expect(subjects(held.missedBy("dc2")), "heard: what it may have missed").toEqual(["a"]);
    held.acked("dc2", [1]);
    expect(held.keys).toBe(0);

    held.down("dc2");
    add("b");
    await clock.advance(TTL_MS + 1);
    add("c");
    // dc2 down for the TTL: forgotten (one removed from the deployment costs nothing for good).
    expect(held.knows("dc2")).toBe(false);
    expect(held.keys, "b past its TTL; c kept keepMs, for a DC heard meanwhile").toBe(1);
    await clock.advance(KEEP_MS + 1);
    add("d");
    expect(subjects(held.missedBy("dc3")), "dc3 heard: what it may have missed").toEqual(["d"]);
  });

  test("counter - at maxKeys the oldest go first, counted lost when a DC had not acknowledged them; 0 holds none", async () => {
    const { held, add } = setUp({ maxKeys: 10, peers: ["dc2"] });
    for (let i = 0; i < 3; i++) expect(add(`m${i}`, 3)).toBe(0);
    expect(add("m3", 3), "m0 dropped, never acknowledged").toBe(3);
    expect(held.keys).toBe(9);
    // A message larger than the cap is not held at all.
    expect(add("huge", 11)).toBe(9 + 11);
    expect(held.keys).toBe(0);
    add("n0", 3);
    held.acked("dc2", [6]);
    expect(add("n1", 3), "n0 was acknowledged and let go").toBe(0);

    const none = setUp({ maxKeys: 0, peers: ["dc2"] });
    expect(none.add("x", 5)).toBe(0);
    expect(none.held.keys).toBe(0);
    expect(none.held.missedBy("dc2")).toEqual([]);
  });

  test("counter - in the discovery window a message one DC acknowledged is kept keepMs, for another heard meanwhile", async () => {
    const { clock, held, add, discovery } = setUp();
    discovery.on = true;
    held.missedBy("dc2");
    add("a");
    held.acked("dc2", [1]);
    expect(held.keys, "dc3 may be heard any moment").toBe(1);
    await clock.advance(KEEP_MS / 2);
    expect(subjects(held.missedBy("dc3")), "dc3 heard").toEqual(["a"]);
    held.acked("dc3", [1]);
    discovery.on = false;
    held.due();
    expect(held.keys, "out of the window, both acknowledged").toBe(0);
    add("b");
    held.acked("dc2", [2]);
    held.acked("dc3", [2]);
    expect(held.keys, "out of the window: let go once both acknowledged").toBe(0);
  });

  test("counter - a DC that takes no keys is not held for, up or down; a stop counts what a DC had not acknowledged past the wait", async () => {
    const { clock, held, taken, add } = setUp();
    taken.set("none", "off");
    held.missedBy("none");
    held.down("none");
    held.missedBy("dc2");
    add("a");
    held.acked("dc2", [1]);
    expect(held.keys, "nobody else needs it").toBe(0);
    add("b");
    await clock.advance(ACK_WAIT_MS);
    add("c");
    // b waited past its first wait, c is in flight: only b counts.
    expect(held.release()).toBe(1);
  });

  test("counter - past 31 DCs a DC is held for by time: keepMs while up, whatever it acknowledges", async () => {
    const { clock, held, add } = setUp();
    const dcs = Array.from({ length: 32 }, (_, i) => `dc${i + 2}`);
    for (const dc of dcs) held.missedBy(dc);
    add("a");
    for (const dc of dcs) held.acked(dc, [1]);
    expect(held.keys, "the 32nd has no bit: its acknowledgement is not kept").toBe(1);
    await clock.advance(KEEP_MS + 1);
    held.due();
    expect(held.keys, "held keepMs for it").toBe(0);
  });
});

describe("counter - keys sent again, paced by their acknowledgements", () => {
  test("counter - at most RESEND_WINDOW_KEYS sent again wait for acknowledgements; one acknowledged, or past its wait, makes room", async () => {
    const { clock, held, add } = setUp({ maxKeys: 20 * RESEND_BUDGET_KEYS, peers: ["dc2"] });
    held.missedBy("dc2");
    for (let i = 0; i < 12; i++) add(`m${i}`, RESEND_BUDGET_KEYS / 2);
    // A cut: dc2 missed everything, and is owed it once back.
    held.down("dc2");
    const again = [...subjects(held.missedBy("dc2"))];
    for (let call = 0; call < 5; call++) again.push(...subjects(held.due()));
    expect(again, "a budget a call, until the window is full").toEqual(
      Array.from({ length: (2 * RESEND_WINDOW_KEYS) / RESEND_BUDGET_KEYS }, (_, i) => `m${i}`),
    );
    // Acknowledgements of the first two come back: room for two more.
    held.acked("dc2", [1, 2]);
    expect(subjects(held.due())).toEqual(["m8", "m9"]);
    expect(held.due()).toEqual([]);
    // Nothing else comes back: once their wait (twice ackWaitMs, a second try) is over, the oldest go
    // again, a budget at a time, and what was never sent after the cut waits behind them.
    await clock.advance(2 * ACK_WAIT_MS);
    expect(subjects(held.due())).toEqual(["m2", "m3"]);
    held.acked("dc2", [3, 4, 5, 6, 7, 8, 9, 10]);
    expect(subjects(held.due()), "all acknowledged but the last two, owed still").toEqual(["m10", "m11"]);
  });

  test("counter - an acknowledgement anywhere in the window makes room at once; what a DC asks for again is no longer waited for", async () => {
    const { held, add } = setUp({ maxKeys: 20 * RESEND_BUDGET_KEYS, peers: ["dc2"] });
    held.missedBy("dc2");
    for (let i = 0; i < 12; i++) add(`m${i}`, RESEND_BUDGET_KEYS / 2);
    held.down("dc2");
    held.missedBy("dc2");
    for (let call = 0; call < 3; call++) held.due();
    expect(held.due(), "the window is full: m0 to m7 wait").toEqual([]);
    // dc2's nodes acknowledge in any order: the middle of the window comes back first.
    held.acked("dc2", [5, 6]);
    expect(subjects(held.due())).toEqual(["m8", "m9"]);
    expect(held.due()).toEqual([]);
    // dc2 asks (the other way of the link healed later): all it lacks goes again, the window or not.
    expect(subjects(held.missedBy("dc2", false))).toEqual(["m0", "m1"]);
  });

  test("counter - a DC held for by time gets what it is owed while the window waits for another", async () => {
    const { held, taken, add } = setUp({ maxKeys: 20 * RESEND_BUDGET_KEYS, peers: ["dc2"] });
    taken.set("old", "unknown");
    held.missedBy("dc2");
    held.missedBy("old");
    for (let i = 0; i < 12; i++) add(`m${i}`, RESEND_BUDGET_KEYS / 2);
    held.acked("dc2", [9, 10, 11, 12]);
    held.down("dc2");
    held.missedBy("dc2");
    for (let call = 0; call < 3; call++) held.due();
    expect(held.due(), "m0 to m7 wait for dc2").toEqual([]);
    // old is owed everything: what dc2 has goes to it now; what dc2 lacks waits for room.
    expect(subjects(held.missedBy("old"))).toEqual(["m8", "m9"]);
    expect(subjects(held.due())).toEqual(["m10", "m11"]);
  });

  test("counter - an acknowledgement of a message sent again says nothing of how long they take", async () => {
    const { clock, held, add } = setUp({ peers: ["dc2"] });
    held.missedBy("dc2");
    add("a");
    await clock.advance(ACK_WAIT_MS);
    expect(subjects(held.due())).toEqual(["a"]);
    // Which of the two it acknowledges is not known (Karn's rule): no measure of the wait.
    await clock.advance(10 * ACK_WAIT_MS);
    held.acked("dc2", [1]);
    add("b");
    await clock.advance(ACK_WAIT_MS);
    expect(subjects(held.due())).toEqual(["b"]);
  });

  test("counter - while acknowledgements take longer than ackWaitMs, a message waits about as long before it goes again", async () => {
    const { clock, held, add } = setUp({ peers: ["dc2"] });
    held.missedBy("dc2");
    const slowMs = 3 * ACK_WAIT_MS;
    for (let i = 1; i <= 10; i++) {
      add(`a${i}`);
      await clock.advance(slowMs);
      held.acked("dc2", [i]);
    }
    add("b");
    await clock.advance(slowMs - 1);
    expect(held.due(), "past ackWaitMs, within the time acknowledgements take").toEqual([]);
    await clock.advance(slowMs);
    expect(subjects(held.due())).toEqual(["b"]);
    // However slow they were, a message waits at most 16 times ackWaitMs before its first resend.
    for (let i = 12; i <= 21; i++) {
      add(`c${i}`);
      await clock.advance(100 * ACK_WAIT_MS);
      held.acked("dc2", [i]);
    }
    add("d");
    await clock.advance(16 * ACK_WAIT_MS);
    expect(subjects(held.due())).toContain("d");
  });
});
