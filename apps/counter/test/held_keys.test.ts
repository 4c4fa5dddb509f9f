/**
 * What a counter node holds of the idempotency keys it sent (held_keys.ts), on a manual clock: for
 * `keepMs` while every DC is up, until it is back while one is down, never past the keys' TTL nor
 * past `maxKeys` (LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS), the oldest dropped first.
 */
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { HeldKeys, type SentKeys } from "../src/held_keys.js";

const KEEP_MS = 6_000;
const TTL_MS = 60_000;

function sent(name: string, keys = 1): SentKeys {
  return { subject: `lc.keys.dc1.${name}`, data: new TextEncoder().encode(name), keys };
}

function setUp(maxKeys = 100) {
  const clock = new ManualClock();
  const keep = { ms: KEEP_MS };
  const held = new HeldKeys({ clock, keepMs: () => keep.ms, ttlMs: TTL_MS, maxKeys });
  return { clock, held, keep };
}

const subjects = (list: readonly SentKeys[]): string[] =>
  list.map((s) => s.subject.slice("lc.keys.dc1.".length));

describe("counter - keys held for DCs that may miss them", () => {
  test("counter - every DC up: a message is held for keepMs, then let go; what is held is a copy, oldest first", async () => {
    const { clock, held } = setUp();
    const first = sent("a");
    held.add(first);
    await clock.advance(KEEP_MS / 2);
    held.add(sent("b", 3));
    first.data.fill(0);
    expect(held.keys).toBe(4);
    const both = held.missedBy("dc2");
    expect(subjects(both)).toEqual(["a", "b"]);
    expect(new TextDecoder().decode(both[0]!.data), "a copy, not the sender's buffer").toBe("a");

    await clock.advance(KEEP_MS / 2 + 1);
    expect(subjects(held.missedBy("dc2")), "a is older than keepMs").toEqual(["b"]);
    await clock.advance(KEEP_MS);
    expect(held.missedBy("dc2")).toEqual([]);
    expect(held.keys).toBe(0);
  });

  test("counter - keepMs is asked at each expiry: a longer DC lease heard since keeps what was sent before it", async () => {
    const { clock, held, keep } = setUp();
    held.add(sent("a"));
    // A DC announcing a lease three times as long is heard: a cut of it is found down that much later.
    keep.ms = 3 * KEEP_MS;
    await clock.advance(2 * KEEP_MS);
    expect(subjects(held.missedBy("dc2")), "held past the first keepMs").toEqual(["a"]);
    await clock.advance(KEEP_MS + 1);
    expect(held.missedBy("dc2"), "let go past the longer one").toEqual([]);
  });

  test("counter - while a DC is down everything stays past keepMs, until it is up again; never past the TTL", async () => {
    const { clock, held } = setUp();
    held.add(sent("before"));
    held.down("dc2");
    await clock.advance(KEEP_MS * 3);
    held.add(sent("during"));
    expect(held.keys).toBe(2);
    expect(subjects(held.missedBy("dc2")), "dc2 up: everything, to send again").toEqual(["before", "during"]);
    // Every DC up again: what is older than keepMs goes.
    held.add(sent("after"));
    expect(subjects(held.missedBy("dc2"))).toEqual(["during", "after"]);

    held.down("dc3");
    await clock.advance(TTL_MS + 1);
    held.add(sent("late"));
    expect(subjects(held.missedBy("dc3")), "the keys are gone everywhere past their TTL").toEqual(["late"]);
  });

  test("counter - at maxKeys the oldest go first, counted lost only while a DC is down; 0 holds none", async () => {
    const { clock, held } = setUp(10);
    for (let i = 0; i < 5; i++) expect(held.add(sent(`up${i}`, 3))).toBe(0);
    expect(held.keys, "at most maxKeys").toBe(9);
    expect(subjects(held.missedBy("dc2"))).toEqual(["up2", "up3", "up4"]);

    held.down("dc2");
    expect(held.add(sent("down0", 3)), "one message of 3 keys dropped for the down DC").toBe(3);
    expect(held.keys).toBe(9);
    // A message larger than the cap is not held at all.
    expect(held.add(sent("huge", 11))).toBe(9 + 11);
    expect(held.keys).toBe(0);
    await clock.advance(1);

    const none = setUp(0).held;
    expect(none.add(sent("x", 5))).toBe(0);
    expect(none.keys).toBe(0);
    expect(none.missedBy("dc2")).toEqual([]);
  });

  test("counter - a DC down for the keys' TTL is held for no more: one removed from the deployment costs nothing for good", async () => {
    const { clock, held } = setUp(10);
    held.add(sent("old", 3));
    await clock.advance(KEEP_MS * 2);
    // Down after keepMs: what every DC had long enough to get is not held for it.
    held.down("dc2");
    expect(held.keys).toBe(0);
    held.add(sent("a", 3));
    await clock.advance(TTL_MS + 1);
    held.add(sent("b", 3));
    // The TTL passed: dc2 is forgotten, and only keepMs holds again.
    await clock.advance(KEEP_MS + 1);
    held.add(sent("c", 3));
    expect(subjects(held.missedBy("dc3"))).toEqual(["c"]);
    for (let i = 0; i < 4; i++) expect(held.add(sent(`d${i}`, 3)), "nothing counted lost").toBe(0);
  });
});
