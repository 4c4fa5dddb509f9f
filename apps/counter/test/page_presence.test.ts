import { describe, expect, test } from "vitest";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { PagePresence, type Hold } from "../src/page_presence.js";

const GRACE_MS = 3000;
const T0 = 1_000_000;
/** One active socket: what a gateway holds of a viewer in a tab in front. */
const HELD: Hold = { sockets: 1, active: true };

function held(...viewers: string[]): Map<string, Hold> {
  return new Map(viewers.map((v) => [v, HELD]));
}

describe("counter - page presence", () => {
  test("counter - a viewer held by several gateways and tabs counts once", () => {
    const p = new PagePresence();
    p.apply("g1", "v:alice", HELD, T0, GRACE_MS);
    p.apply("g2", "v:alice", HELD, T0, GRACE_MS);
    p.apply("g1", "v:alice", HELD, T0, GRACE_MS);
    p.apply("g1", "v:bob", HELD, T0, GRACE_MS);
    expect(p.count).toBe(2);
    // One gateway letting go of alice is not her leaving: another still holds her, nothing lingers.
    p.apply("g1", "v:alice", undefined, T0 + 10, GRACE_MS);
    expect(p.count).toBe(2);
    expect(p.nextDeadline()).toBeUndefined();
    expect(p.heldBy("g1")).toEqual(["v:bob"]);
    expect(p.heldBy("g2")).toEqual(["v:alice"]);
  });

  test("counter - a viewer whose last gateway lets go lingers for the grace window, then stops counting", () => {
    const p = new PagePresence();
    p.apply("g1", "v:alice", HELD, T0, GRACE_MS);
    p.apply("g1", "v:alice", undefined, T0 + 100, GRACE_MS);
    expect(p.count).toBe(1);
    expect(p.nextDeadline()).toBe(T0 + 100 + GRACE_MS);
    expect(p.heldBy("g1")).toEqual([]);
    p.expire(T0 + 100 + GRACE_MS - 1);
    expect(p.count).toBe(1);
    p.expire(T0 + 100 + GRACE_MS);
    expect(p.count).toBe(0);
    expect(p.isEmpty).toBe(true);
    expect(p.nextDeadline()).toBeUndefined();
  });

  test("counter - a viewer who comes back within grace, at any gateway, is not counted twice and stops lingering", () => {
    const p = new PagePresence();
    p.apply("g1", "v:alice", HELD, T0, GRACE_MS);
    p.apply("g1", "v:alice", undefined, T0 + 100, GRACE_MS);
    p.apply("g2", "v:alice", HELD, T0 + 200, GRACE_MS);
    expect(p.count).toBe(1);
    expect(p.nextDeadline()).toBeUndefined();
    // Her old grace deadline passing changes nothing: she is held again.
    p.expire(T0 + 100 + GRACE_MS);
    expect(p.count).toBe(1);
  });

  test("counter - leaves from a gateway that does not hold the viewer are ignored", () => {
    const p = new PagePresence();
    p.apply("g1", "v:ghost", undefined, T0, GRACE_MS);
    expect(p.count).toBe(0);
    p.apply("g1", "v:alice", HELD, T0, GRACE_MS);
    p.apply("g2", "v:alice", undefined, T0, GRACE_MS);
    expect(p.count).toBe(1);
    expect(p.nextDeadline()).toBeUndefined();
    // A repeated leave (a retried batch) neither resets nor extends the grace.
    p.apply("g1", "v:alice", undefined, T0 + 10, GRACE_MS);
    p.apply("g1", "v:alice", undefined, T0 + 500, GRACE_MS);
    expect(p.nextDeadline()).toBe(T0 + 10 + GRACE_MS);
  });

  test("counter - a departure without grace ends the viewer at once, lingering or not, unless another gateway holds it", () => {
    const p = new PagePresence();
    p.apply("g1", "v:alice", HELD, T0, GRACE_MS);
    p.apply("g1", "v:alice", undefined, T0 + 10, 0);
    expect(p.count).toBe(0);
    expect(p.nextDeadline()).toBeUndefined();

    // Left with grace first (a leave), then dropped (the socket joined as someone else).
    p.apply("g1", "v:bob", HELD, T0, GRACE_MS);
    p.apply("g1", "v:bob", undefined, T0 + 10, GRACE_MS);
    expect(p.count).toBe(1);
    p.apply("g1", "v:bob", undefined, T0 + 20, 0);
    expect(p.count).toBe(0);
    expect(p.nextDeadline()).toBeUndefined();

    // Another gateway still holds carol: she keeps counting.
    p.apply("g1", "v:carol", HELD, T0, GRACE_MS);
    p.apply("g2", "v:carol", HELD, T0, GRACE_MS);
    p.apply("g1", "v:carol", undefined, T0 + 10, 0);
    expect(p.count).toBe(1);
    expect(p.heldBy("g2")).toEqual(["v:carol"]);
  });

  test("counter - replace sets what one gateway holds and lets the rest linger", () => {
    const p = new PagePresence();
    for (const v of ["v:a", "v:b"]) p.apply("g1", v, HELD, T0, GRACE_MS);
    p.apply("g2", "v:a", HELD, T0, GRACE_MS);
    p.apply("g2", "v:z", HELD, T0, GRACE_MS);
    p.replace("g1", held("v:b", "v:c", "v:c"), T0 + 50, GRACE_MS);
    expect(p.heldBy("g1").sort()).toEqual(["v:b", "v:c"]);
    // v:a is still held by g2, so nothing lingers; g2's viewers are untouched.
    expect(p.nextDeadline()).toBeUndefined();
    expect(p.heldBy("g2").sort()).toEqual(["v:a", "v:z"]);
    expect(p.count).toBe(4);

    p.replace("g1", held(), T0 + 60, GRACE_MS);
    expect(p.heldBy("g1")).toEqual([]);
    expect(p.count).toBe(4);
    expect(p.nextDeadline()).toBe(T0 + 60 + GRACE_MS);
    p.expire(T0 + 60 + GRACE_MS);
    expect(p.count).toBe(2);
  });

  test("counter - dropping a dead gateway stops its viewers at once, without grace", () => {
    const p = new PagePresence();
    p.apply("dead", "v:only-dead", HELD, T0, GRACE_MS);
    p.apply("dead", "v:both", HELD, T0, GRACE_MS);
    p.apply("live", "v:both", HELD, T0, GRACE_MS);
    p.apply("live", "v:left", HELD, T0, GRACE_MS);
    p.apply("live", "v:left", undefined, T0 + 1, GRACE_MS);
    expect(p.count).toBe(3);

    p.dropGateway("dead");
    // v:only-dead is gone now; v:both is still held by the live gateway; v:left keeps lingering.
    expect(p.count).toBe(2);
    expect(p.heldBy("dead")).toEqual([]);
    expect(p.heldBy("live")).toEqual(["v:both"]);
    expect(p.nextDeadline()).toBe(T0 + 1 + GRACE_MS);
    p.dropGateway("dead");
    p.dropGateway("never-seen");
    expect(p.count).toBe(2);
  });

  test("counter - expire ends only the graces that are over", () => {
    const p = new PagePresence();
    for (const [i, v] of ["v:1", "v:2", "v:3"].entries()) {
      p.apply("g1", v, HELD, T0, GRACE_MS);
      p.apply("g1", v, undefined, T0 + i * 1000, GRACE_MS);
    }
    expect(p.nextDeadline()).toBe(T0 + GRACE_MS);
    p.expire(T0 + GRACE_MS + 1000);
    expect(p.count).toBe(1);
    expect(p.nextDeadline()).toBe(T0 + 2000 + GRACE_MS);
  });

  test("counter - a resync that lists what the gateway already holds leaves those viewers untouched", () => {
    const p = new PagePresence();
    for (const v of ["v:1", "v:2", "v:3"]) p.apply("g1", v, HELD, T0, GRACE_MS);
    p.apply("g2", "v:other", HELD, T0, GRACE_MS);
    p.replace("g1", held("v:3", "v:2", "v:1"), T0 + 10, GRACE_MS);
    // Not let go and taken again: no grace started, and each keeps its place.
    expect(p.heldBy("g1")).toEqual(["v:1", "v:2", "v:3"]);
    expect(p.heldBy("g2")).toEqual(["v:other"]);
    expect(p.nextDeadline()).toBeUndefined();
    expect(p.count).toBe(4);
  });

  test("counter - a viewer is active while any of its sockets on any gateway is; connections sum the sockets", () => {
    const p = new PagePresence();
    const hidden = (sockets: number): Hold => ({ sockets, active: false });
    const shown = (sockets: number): Hold => ({ sockets, active: true });
    p.apply("g1", "v:alice", hidden(2), T0, GRACE_MS);
    p.apply("g1", "v:bob", shown(1), T0, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 1, 3]);
    // Alice opens a visible tab on another gateway: one viewer, active, one more connection.
    p.apply("g2", "v:alice", shown(1), T0, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 2, 4]);
    // Her hidden tabs close: she stays active through the visible one.
    p.apply("g1", "v:alice", undefined, T0 + 1, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 2, 2]);
    // The visible one hides.
    p.apply("g2", "v:alice", hidden(1), T0 + 2, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 1, 2]);
    // The same state again changes nothing (ops are retried).
    p.apply("g2", "v:alice", hidden(1), T0 + 3, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 1, 2]);
  });

  test("counter - a lingering viewer keeps its attention and has no connection, until it comes back or its grace ends", () => {
    const p = new PagePresence();
    p.apply("g1", "v:a", { sockets: 1, active: true }, T0, GRACE_MS);
    p.apply("g1", "v:b", { sockets: 1, active: false }, T0, GRACE_MS);
    p.apply("g1", "v:a", undefined, T0 + 10, GRACE_MS);
    p.apply("g1", "v:b", undefined, T0 + 10, GRACE_MS);
    // A reload: still counted, active as before, no socket open.
    expect([p.count, p.active, p.connections]).toEqual([2, 1, 0]);
    p.apply("g2", "v:a", { sockets: 1, active: true }, T0 + 20, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 1, 1]);
    p.expire(T0 + 10 + GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([1, 1, 1]);
    // A departure without grace ends an active viewer at once.
    p.apply("g2", "v:a", undefined, T0 + 30, 0);
    expect([p.count, p.active, p.connections]).toEqual([0, 0, 0]);
  });

  test("counter - a gateway's death and a resync move attention and connections with the viewers", () => {
    const p = new PagePresence();
    p.apply("dead", "v:a", { sockets: 3, active: true }, T0, GRACE_MS);
    p.apply("dead", "v:b", { sockets: 1, active: true }, T0, GRACE_MS);
    p.apply("live", "v:b", { sockets: 2, active: false }, T0, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 2, 6]);
    p.dropGateway("dead");
    expect([p.count, p.active, p.connections]).toEqual([1, 0, 2]);
    // The resync of "live" says b now has one visible socket there, and c arrived hidden.
    p.replace(
      "live",
      new Map<string, Hold>([
        ["v:b", { sockets: 1, active: true }],
        ["v:c", { sockets: 1, active: false }],
      ]),
      T0 + 1,
      GRACE_MS,
    );
    expect([p.count, p.active, p.connections]).toEqual([2, 1, 2]);
    // An empty resync: both linger (b active), no connection left.
    p.replace("live", new Map(), T0 + 2, GRACE_MS);
    expect([p.count, p.active, p.connections]).toEqual([2, 1, 0]);
  });

  test("counter - graces that end in the order they began, with returns and re-leaves between, end each viewer once", () => {
    const p = new PagePresence();
    for (let i = 0; i < 200; i++) p.hold("g1", `v:${i}`, 1, i % 2 === 0);
    // Leaves one a millisecond apart; every fifth viewer comes back and leaves again 1 s later.
    for (let i = 0; i < 200; i++) p.release("g1", `v:${i}`, T0 + i, GRACE_MS);
    for (let i = 0; i < 200; i += 5) {
      p.hold("g2", `v:${i}`, 1, false);
      p.release("g2", `v:${i}`, T0 + 1_000 + i, GRACE_MS);
    }
    expect([p.count, p.connections, p.nextDeadline()]).toEqual([200, 0, T0 + 1 + GRACE_MS]);
    // Past the first 120 graces: the 96 viewers among them that did not come back end.
    p.expire(T0 + 119 + GRACE_MS);
    expect([p.count, p.nextDeadline()]).toEqual([104, T0 + 121 + GRACE_MS]);
    // Before the second graces end, only first graces are left to end.
    p.expire(T0 + 999 + GRACE_MS);
    expect([p.count, p.active, p.nextDeadline()]).toEqual([40, 0, T0 + 1_000 + GRACE_MS]);
    p.expire(T0 + 1_199 + GRACE_MS);
    expect([p.count, p.active, p.nextDeadline()]).toEqual([0, 0, undefined]);
  });

  test("counter - a grace that no longer stands never holds up one behind it, also after the clock stepped back", () => {
    const p = new PagePresence();
    p.hold("g1", "v:a", 1, true);
    p.hold("g1", "v:b", 1, true);
    // a leaves and comes back: its grace (deadline T0 + 1000 + grace) no longer stands.
    p.release("g1", "v:a", T0 + 1_000, GRACE_MS);
    p.hold("g2", "v:a", 1, true);
    // The clock steps back a second; b leaves, its deadline earlier than a's stale one ahead of it.
    p.release("g1", "v:b", T0, GRACE_MS);
    p.expire(T0 + GRACE_MS);
    expect([p.count, p.active, p.has("v:b"), p.nextDeadline()]).toEqual([1, 1, false, undefined]);
  });

  test("counter - under random ops the totals match a reference model at every step", () => {
    const seed = testSeed("page presence model");
    for (let run = 0; run < 50; run++) {
      const rnd = mulberry32(seed + run);
      let arrivals = 0;
      const p = new PagePresence(() => arrivals++);
      // The model: what each gateway holds of each viewer, and who lingers until when (and how active).
      let arrived = 0;
      const holds = new Map<string, Map<string, Hold>>();
      const lingering = new Map<string, { at: number; active: boolean }>();
      const held = (v: string): boolean => [...holds.values()].some((m) => m.has(v));
      const active = (v: string): boolean => [...holds.values()].some((m) => m.get(v)?.active === true);
      const leave = (g: string, v: string, grace: number, now: number): void => {
        const m = holds.get(g);
        if (m?.has(v) === true) {
          const was = active(v);
          m.delete(v);
          if (!held(v) && grace > 0) lingering.set(v, { at: now + grace, active: was });
        } else if (!held(v) && grace <= 0) lingering.delete(v);
      };
      const hold = (g: string, v: string, h: Hold): void => {
        if (!held(v) && !lingering.has(v)) arrived++;
        if (!holds.has(g)) holds.set(g, new Map());
        holds.get(g)!.set(v, h);
        lingering.delete(v);
      };
      const randomHold = (): Hold => ({ sockets: 1 + rnd.int(3), active: rnd.chance(0.5) });
      let now = T0;
      for (let step = 0; step < 400; step++) {
        now += rnd.int(300);
        const g = `g${rnd.int(3)}`;
        const v = `v:${rnd.int(8)}`;
        const roll = rnd.next();
        if (roll < 0.45) {
          const h = randomHold();
          hold(g, v, h);
          p.apply(g, v, h, now, GRACE_MS);
        } else if (roll < 0.75) {
          const grace = rnd.chance(0.3) ? 0 : GRACE_MS;
          leave(g, v, grace, now);
          p.apply(g, v, undefined, now, grace);
        } else if (roll < 0.85) {
          const next = new Map<string, Hold>();
          for (let i = rnd.int(4); i > 0; i--) next.set(`v:${rnd.int(8)}`, randomHold());
          for (const other of [...(holds.get(g)?.keys() ?? [])])
            if (!next.has(other)) leave(g, other, GRACE_MS, now);
          for (const [other, h] of next) hold(g, other, h);
          p.replace(g, next, now, GRACE_MS);
        } else if (roll < 0.9) {
          for (const other of [...(holds.get(g)?.keys() ?? [])]) leave(g, other, 0, now);
          holds.delete(g);
          p.dropGateway(g);
        } else {
          for (const [other, l] of [...lingering]) if (l.at <= now) lingering.delete(other);
          p.expire(now);
        }
        const viewers = new Set<string>();
        let connections = 0;
        for (const m of holds.values())
          for (const [other, h] of m) {
            viewers.add(other);
            connections += h.sockets;
          }
        let looking = [...viewers].filter(active).length;
        for (const [other, l] of lingering) if (!viewers.has(other) && l.active) looking++;
        const count = new Set([...viewers, ...lingering.keys()]).size;
        const deadlines = [...lingering.values()].map((l) => l.at);
        expect(
          [p.count, p.active, p.connections, arrivals, new Set(p.viewers())],
          `seed ${seed + run}, step ${step}`,
        ).toEqual([count, looking, connections, arrived, new Set([...viewers, ...lingering.keys()])]);
        // Read at some steps only: reading it passes over graces that no longer stand, which
        // `expire` must do as well on its own.
        if (rnd.chance(0.3))
          expect(p.nextDeadline(), `seed ${seed + run}, step ${step}`).toBe(
            deadlines.length > 0 ? Math.min(...deadlines) : undefined,
          );
      }
    }
  });
});
