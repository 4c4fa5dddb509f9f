/**
 * What a counter node holds of the idempotency keys it sent (held_keys.ts), on a manual clock: until
 * every DC held for (peers, and DCs heard) says it heard them, again when one shows it missed them;
 * for DCs that say nothing of what they heard, `keepMs` while up and until back while down; never
 * past the keys' TTL nor past `maxKeys` (LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS), the oldest first.
 */
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { HeldKeys, type SentKeys } from "../src/held_keys.js";

const KEEP_MS = 6_000;
const TTL_MS = 60_000;

function sent(name: string, keys = 1): SentKeys {
  return { subject: `lc.keys.dc1.${name}`, data: new TextEncoder().encode(name), keys };
}

function setUp(options: { maxKeys?: number; peers?: string[] } = {}) {
  const clock = new ManualClock();
  const keep = { ms: KEEP_MS };
  /** This node's last DC heartbeat number. */
  const beat = { seq: 1 };
  const held = new HeldKeys({
    clock,
    stamp: () => beat.seq,
    peers: options.peers ?? [],
    keepMs: () => keep.ms,
    ttlMs: TTL_MS,
    maxKeys: options.maxKeys ?? 100,
  });
  return { clock, held, keep, beat };
}

const subjects = (list: readonly SentKeys[]): string[] =>
  list.map((s) => s.subject.slice("lc.keys.dc1.".length));

describe("counter - keys held until every DC heard them", () => {
  test("counter - a message is let go once each DC's nodes heard heartbeats on both sides of it", async () => {
    const { held, beat } = setUp({ peers: ["dc2"] });
    held.missedBy("dc3");
    const first = sent("a");
    held.add(first); // after heartbeat 1
    first.data.fill(0);
    beat.seq = 2;
    held.add(sent("b", 3)); // after heartbeat 2
    beat.seq = 3;
    expect(held.keys).toBe(4);

    expect(held.heard("dc2", [{ from: 1, to: 2 }]), "dc2 heard 1 and 2: a crossed").toEqual([]);
    expect(held.keys, "dc3 has not said so").toBe(4);
    expect(held.heard("dc3", [{ from: 1, to: 3 }])).toEqual([]);
    expect(held.keys, "a heard by both, b by dc3 only").toBe(3);
    // One of dc2's nodes heard only the start, another (restarted) only the end: b is not known yet.
    expect(
      held.heard("dc2", [
        { from: 1, to: 2 },
        { from: 3, to: 3 },
      ]),
    ).toEqual([]);
    expect(held.keys).toBe(3);
    expect(held.heard("dc2", [{ from: 1, to: 3 }])).toEqual([]);
    expect(held.keys).toBe(0);
  });

  test("counter - what a DC's nodes missed (sent before each of their runs starts) goes again, stamped anew, a copy", async () => {
    const { held, beat } = setUp({ peers: ["dc2"] });
    const first = sent("a");
    held.add(first);
    first.data.fill(0);
    beat.seq = 5;
    held.add(sent("b"));
    beat.seq = 9;
    // dc2's node heard nothing between 1 and 7 (a cut): a and b go again, now after heartbeat 9.
    const again = held.heard("dc2", [{ from: 7, to: 9 }]);
    expect(subjects(again)).toEqual(["a", "b"]);
    expect(new TextDecoder().decode(again[0]!.data), "a copy, not the sender's buffer").toBe("a");
    expect(held.heard("dc2", [{ from: 7, to: 9 }]), "sent after 9: not known yet").toEqual([]);
    expect(held.keys).toBe(2);
    beat.seq = 10;
    expect(held.heard("dc2", [{ from: 7, to: 10 }])).toEqual([]);
    expect(held.keys).toBe(0);
  });

  test("counter - a DC that says nothing of what it heard: held keepMs while up, until back while down, its missedBy all", async () => {
    const { clock, held, keep } = setUp();
    held.missedBy("old");
    held.add(sent("a"));
    await clock.advance(KEEP_MS / 2);
    held.add(sent("b"));
    await clock.advance(KEEP_MS / 2 + 1);
    // keepMs is asked at each expiry: a longer DC lease heard since keeps a, older than keepMs.
    keep.ms = 3 * KEEP_MS;
    held.add(sent("c"));
    expect(held.keys).toBe(3);
    keep.ms = KEEP_MS;
    held.add(sent("d"));
    expect(subjects(held.missedBy("old")), "all it holds, to send again").toEqual(["b", "c", "d"]);
    held.down("old");
    await clock.advance(KEEP_MS * 3);
    held.add(sent("e"));
    expect(held.keys, "held while down").toBe(4);
    expect(subjects(held.missedBy("old")), "back up: everything").toEqual(["b", "c", "d", "e"]);
    await clock.advance(KEEP_MS + 1);
    held.add(sent("f"));
    expect(subjects(held.missedBy("old"))).toEqual(["f"]);
  });

  test("counter - a peer never heard, or a DC down, is held for until it heard, or for the keys' TTL", async () => {
    const { clock, held, beat } = setUp({ peers: ["dc2"] });
    expect(held.knows("dc2")).toBe(true);
    expect(held.knows("dc9")).toBe(false);
    held.add(sent("a"));
    await clock.advance(TTL_MS / 2);
    held.down("dc2");
    expect(held.keys, "dc2 never heard").toBe(1);
    beat.seq = 2;
    expect(subjects(held.heard("dc2", [{ from: 2, to: 2 }])), "it missed a").toEqual(["a"]);
    beat.seq = 3;
    held.heard("dc2", [{ from: 2, to: 3 }]);
    expect(held.keys).toBe(0);

    held.down("dc2");
    held.add(sent("b"));
    await clock.advance(TTL_MS + 1);
    held.add(sent("c"));
    // dc2 down for the TTL: forgotten (one removed from the deployment costs nothing for good).
    expect(held.knows("dc2")).toBe(false);
    expect(held.keys, "b past its TTL; c kept keepMs, for a DC heard meanwhile").toBe(1);
    await clock.advance(KEEP_MS + 1);
    held.add(sent("d"));
    expect(subjects(held.missedBy("dc3")), "dc3 heard: what it may have missed").toEqual(["d"]);
  });

  test("counter - at maxKeys the oldest go first, counted lost when a DC had not heard them; 0 holds none", async () => {
    const { held, beat } = setUp({ maxKeys: 10, peers: ["dc2"] });
    for (let i = 0; i < 3; i++) expect(held.add(sent(`m${i}`, 3))).toBe(0);
    expect(held.add(sent("m3", 3)), "m0 dropped, dc2 never heard it").toBe(3);
    expect(held.keys).toBe(9);
    // A message larger than the cap is not held at all.
    expect(held.add(sent("huge", 11))).toBe(9 + 11);
    expect(held.keys).toBe(0);
    beat.seq = 2;
    held.add(sent("n0", 3));
    beat.seq = 3;
    held.heard("dc2", [{ from: 1, to: 3 }]);
    expect(held.add(sent("n1", 3)), "n0 was heard and let go").toBe(0);

    const none = setUp({ maxKeys: 0, peers: ["dc2"] }).held;
    expect(none.add(sent("x", 5))).toBe(0);
    expect(none.keys).toBe(0);
    expect(none.missedBy("dc2")).toEqual([]);
  });
});
