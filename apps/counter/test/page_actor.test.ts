import type { Entry } from "@livecount/crdt";
import {
  ACTIVE_COUNTER,
  CONNECTIONS_COUNTER,
  VIEWERS_COUNTER,
  isSeriesCounter,
  transitionsOf,
} from "@livecount/protocol";
import { describe, expect, test } from "vitest";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { PageActor, type ActorHost } from "../src/page_actor.js";
import type { Hold } from "../src/page_presence.js";
import { VisitorHash } from "../src/visitor_hash.js";

const DC = "dc1";
const GRACE_MS = 3000;
const T0 = 1_000_000;
const HELD: Hold = { sockets: 1, active: true };

/** What a gateway holds of each viewer, one active socket each. */
function held(...viewers: string[]): Map<string, Hold> {
  return heldAll(viewers);
}

function heldAll(viewers: Iterable<string>): Map<string, Hold> {
  return new Map([...viewers].map((v) => [v, HELD]));
}

/** An actor's node, reduced to what the actor asks of it; time moves only when a test says so. */
class FakeHost implements ActorHost {
  readonly dc = DC;
  readonly graceMs = GRACE_MS;
  readonly visitorHash = new VisitorHash("test-visitor-key-0123");
  time = T0;
  dirty = 0;
  readonly wakes: number[] = [];

  now(): number {
    return this.time;
  }

  monotonic(): number {
    return this.time;
  }

  markDirty(): void {
    this.dirty++;
  }

  wakeAt(_actor: PageActor, at: number): void {
    this.wakes.push(at);
  }

  floor = 0;

  presenceFloor(): number {
    return this.floor;
  }

  presenceRaised(_partition: number, p: number): void {
    this.floor = Math.max(this.floor, p);
  }

  purgeFloor(): number {
    return 0;
  }

  viewersChanged?: (actor: PageActor) => void;
}

function activeActor(
  host: FakeHost,
  record: Record<string, Record<string, Entry>> = {},
  settleAt = 0,
): PageActor {
  const actor = new PageActor(host, "page", 7, settleAt);
  actor.loaded(record);
  return actor;
}

function viewersEntry(actor: PageActor): Entry {
  return actor.ownEntry(VIEWERS_COUNTER);
}

describe("counter - page actor", () => {
  test("counter - an actor closed while loading stays closed when the load completes, and fails its queued work", () => {
    const host = new FakeHost();
    const actor = new PageActor(host, "page", 7, 0);
    const failures: Array<Error | undefined> = [];
    actor.run((failure) => failures.push(failure));
    actor.close();
    actor.loaded({ [VIEWERS_COUNTER]: { [DC]: { p: 3, n: 0 } } });
    expect(actor.status).toBe("closed");
    expect(failures).toHaveLength(1);
    expect(failures[0]?.name).toBe("ActorClosedError");
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    expect(host.dirty).toBe(0);
  });

  test("counter - joins grow p and leaves grow n of the data center's viewers entry, once the grace is over", () => {
    const host = new FakeHost();
    const actor = activeActor(host);
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    actor.presenceTransitions("g2", transitionsOf([{ viewer: "v:b", present: true }]));
    actor.presenceTransitions("g2", transitionsOf([{ viewer: "v:a", present: true }]));
    expect(viewersEntry(actor)).toEqual({ p: 2, n: 0 });
    expect(host.dirty).toBeGreaterThan(0);
    // Two viewers, both active, on three sockets (v:a on g1 and g2): every presence entry indexed.
    expect(actor.takeUnwritten().filter((w) => !isSeriesCounter(w.counter))).toEqual([
      { page: "page", counter: VIEWERS_COUNTER, dc: DC, entry: { p: 2, n: 0 }, indexed: true },
      { page: "page", counter: ACTIVE_COUNTER, dc: DC, entry: { p: 2, n: 0 }, indexed: true },
      { page: "page", counter: CONNECTIONS_COUNTER, dc: DC, entry: { p: 3, n: 0 }, indexed: true },
    ]);

    host.time += 100;
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: false }]));
    actor.presenceTransitions("g2", transitionsOf([{ viewer: "v:a", present: false }]));
    // Lingering: nothing moves yet, and the actor asked to be woken when the grace ends.
    expect(viewersEntry(actor)).toEqual({ p: 2, n: 0 });
    expect(host.wakes).toContain(T0 + 100 + GRACE_MS);
    host.time = T0 + 100 + GRACE_MS - 1;
    actor.tick(host.time);
    expect(viewersEntry(actor)).toEqual({ p: 2, n: 0 });
    host.time += 1;
    actor.tick(host.time);
    expect(viewersEntry(actor)).toEqual({ p: 2, n: 1 });
    expect(actor.value(VIEWERS_COUNTER)).toBe(1);

    actor.presenceTransitions("g3", transitionsOf([{ viewer: "v:a", present: true }]));
    expect(viewersEntry(actor)).toEqual({ p: 3, n: 1 });
  });

  test("counter - a gateway's death drops its viewers at once and moves only n", () => {
    const host = new FakeHost();
    const actor = activeActor(host);
    for (const v of ["v:a", "v:b", "v:c"])
      actor.presenceTransitions("dead", transitionsOf([{ viewer: v, present: true }]));
    actor.presenceTransitions("live", transitionsOf([{ viewer: "v:c", present: true }]));
    actor.dropGateway("dead");
    expect(viewersEntry(actor)).toEqual({ p: 3, n: 2 });
    expect(actor.viewers).toBe(1);
  });

  test("counter - the actor writes only its own data center's entry and counts the others", () => {
    const host = new FakeHost();
    const actor = activeActor(host, {
      [VIEWERS_COUNTER]: { dc2: { p: 9, n: 4 } },
      likes: { dc2: { p: 3, n: 0 } },
    });
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    expect(actor.value(VIEWERS_COUNTER)).toBe(6);
    expect(actor.snapshot()[VIEWERS_COUNTER]).toEqual({ dc1: { p: 1, n: 0 }, dc2: { p: 9, n: 4 } });
    expect(Object.fromEntries(actor.entriesOf(DC))).toEqual({
      [VIEWERS_COUNTER]: { p: 1, n: 0 },
      [ACTIVE_COUNTER]: { p: 1, n: 0 },
      [CONNECTIONS_COUNTER]: { p: 1, n: 0 },
      likes: { p: 0, n: 0 },
    });
  });

  test("counter - merged entries recount viewers and raise presence only when presence advanced", () => {
    const host = new FakeHost();
    const actor = activeActor(host, { likes: { dc1: { p: 1, n: 0 } } });
    let recounts = 0;
    host.viewersChanged = () => recounts++;
    /** Whether the actor recounted its viewers since the last call. */
    const recounted = (): boolean => {
      const any = recounts > 0;
      recounts = 0;
      return any;
    };
    // Likes of both DCs, this one's included (a rebuilt DC gets them back): no viewer moved.
    actor.mergeDurable({ likes: { dc1: { p: 5, n: 0 }, dc2: { p: 2, n: 0 } } });
    expect(actor.value("likes")).toBe(7);
    expect([recounted(), host.floor]).toEqual([false, 0]);
    // Another DC's viewers: recounted, this DC's presence untouched.
    actor.mergeDurable({ [VIEWERS_COUNTER]: { dc2: { p: 4, n: 1 } } });
    expect([recounted(), host.floor]).toEqual([true, 0]);
    // This DC's own viewers entry moved up under the actor: the floor rises, and presence counts on
    // top of the entry (no viewer is held here, so it moves back to zero: dc2's 3 remain).
    actor.mergeDurable({ [VIEWERS_COUNTER]: { dc1: { p: 6, n: 2 } } });
    expect([recounted(), host.floor]).toEqual([true, 6]);
    expect(actor.value(VIEWERS_COUNTER)).toBe(3);
    expect(actor.ownEntry(VIEWERS_COUNTER)).toEqual({ p: 6, n: 6 });
    // Nothing advanced: nothing recounted.
    actor.mergeDurable({ [VIEWERS_COUNTER]: { dc2: { p: 4, n: 1 } }, likes: { dc2: { p: 1, n: 0 } } });
    expect(recounted()).toBe(false);
  });

  test("counter - a deleted counter still hidden with its entry here at zero is not published again, until it changes", () => {
    const host = new FakeHost();
    const actor = activeActor(host, {
      likes: { dc1: { p: 3, n: 3 } },
      "@del:likes": { dc1: { p: 6, n: 0 } },
      shares: { dc1: { p: 2, n: 0 } },
    });
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    // What a presence flush publishes: another DC that purged `likes` must not get it back.
    expect(Object.keys(Object.fromEntries(actor.entriesOf(DC))).sort()).toEqual([
      ACTIVE_COUNTER,
      CONNECTIONS_COUNTER,
      VIEWERS_COUNTER,
      "shares",
    ]);
    // Changed since the delete (a like from dc2): visible again, published with the rest.
    actor.mergeRemote("dc2", { likes: { p: 1, n: 0 } });
    expect(Object.keys(Object.fromEntries(actor.entriesOf(DC))).sort()).toEqual([
      ACTIVE_COUNTER,
      CONNECTIONS_COUNTER,
      "@del:likes",
      VIEWERS_COUNTER,
      "likes",
      "shares",
    ]);
  });

  test("counter - presence that arrives while the page loads is applied after it", () => {
    const host = new FakeHost();
    const actor = new PageActor(host, "page", 7, 0);
    actor.run(() => actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }])));
    expect(actor.status).toBe("loading");
    expect(viewersEntry(actor)).toEqual({ p: 0, n: 0 });
    actor.loaded({ [VIEWERS_COUNTER]: { [DC]: { p: 5, n: 5 } } });
    expect(viewersEntry(actor)).toEqual({ p: 6, n: 5 });
  });

  test("counter - after a takeover the settle window holds the viewers entry until presence has resynced", () => {
    const host = new FakeHost();
    const settleAt = T0 + 3000;
    // The previous owner left 6 viewers counted; gateways resync them one by one.
    const actor = activeActor(host, { [VIEWERS_COUNTER]: { [DC]: { p: 10, n: 4 } } }, settleAt);
    expect(actor.settled).toBe(false);
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    actor.replaceGateway("g2", held("v:b", "v:c"));
    host.time = settleAt - 1;
    actor.tick(host.time);
    // No dip while the rest of the gateways may still be resyncing.
    expect(viewersEntry(actor)).toEqual({ p: 10, n: 4 });
    actor.replaceGateway("g3", held("v:d", "v:e", "v:f", "v:g"));
    expect(viewersEntry(actor)).toEqual({ p: 10, n: 4 });

    host.time = settleAt;
    actor.tick(host.time);
    expect(actor.settled).toBe(true);
    expect(viewersEntry(actor)).toEqual({ p: 11, n: 4 });
    expect(actor.value(VIEWERS_COUNTER)).toBe(7);
  });

  test("counter - an actor holding stored viewers asks to be ticked when its settle window ends", () => {
    const host = new FakeHost();
    const actor = activeActor(host, { [VIEWERS_COUNTER]: { [DC]: { p: 10, n: 4 } } }, T0 + 3000);
    expect(host.wakes).toEqual([T0 + 3000]);
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    host.time = T0 + 2999;
    actor.tick(host.time);
    expect(viewersEntry(actor)).toEqual({ p: 10, n: 4 });
    host.time = T0 + 3000;
    actor.tick(host.time);
    expect(viewersEntry(actor)).toEqual({ p: 10, n: 9 });
  });

  test("counter - a page with no viewers counted has nothing to hold and counts at once", () => {
    const host = new FakeHost();
    const actor = activeActor(host, { [VIEWERS_COUNTER]: { [DC]: { p: 4, n: 4 } } }, T0 + 3000);
    expect(actor.settled).toBe(true);
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    expect(viewersEntry(actor)).toEqual({ p: 5, n: 4 });
  });

  test("counter - an actor is idle exactly when no viewer counts and its writes are taken, written and published", () => {
    const host = new FakeHost();
    const actor = activeActor(host, { likes: { dc2: { p: 2, n: 0 } } });
    expect(actor.isIdle).toBe(true);
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: true }]));
    expect(actor.isIdle).toBe(false);
    const writes = actor.takeUnwritten();
    expect(writes.length).toBeGreaterThan(0);
    expect(actor.hasPendingWork).toBe(true); // the write is in flight
    actor.written();
    expect(actor.takeUnpublished().get(DC)?.get(VIEWERS_COUNTER)).toEqual({ p: 1, n: 0 });
    expect(actor.hasPendingWork).toBe(false);
    actor.presenceTransitions("g1", transitionsOf([{ viewer: "v:a", present: false, drop: true }]));
    expect(actor.hasPendingWork).toBe(true);
    actor.takeUnwritten();
    actor.written();
    expect(actor.takeUnpublished().get(DC)?.get(VIEWERS_COUNTER)).toEqual({ p: 1, n: 1 });
    expect(actor.isIdle).toBe(true);
    // A failed write with nothing to publish again: only the entries wait, and go with the next.
    actor.restoreUnwritten(writes, []);
    expect(actor.unwrittenCount).toBeGreaterThan(0);
    actor.takeUnwritten();
    actor.written();
    expect(actor.hasPendingWork).toBe(false);
    // What publishes again is this DC's time buckets among the writes (peaks, visitors), no counter.
    expect([...(actor.takeUnpublished().get(DC)?.keys() ?? [])].every(isSeriesCounter)).toBe(true);
    expect(actor.isIdle).toBe(true);
    // Merged entries of another DC, already durable, leave nothing to write.
    actor.mergeDurable({ likes: { dc2: { p: 3, n: 0 } } });
    expect(actor.entries("likes")).toEqual({ dc2: { p: 3, n: 0 } });
    expect(actor.isIdle).toBe(true);
  });

  test("counter - random joins, leaves, resyncs and gateway deaths converge to the distinct live viewers", () => {
    const seed = testSeed("page actor presence");
    const rnd = mulberry32(seed);
    const ROUNDS = 200;
    const STEPS = 300;
    const VIEWERS = Array.from({ length: 12 }, (_, i) => `v:${i}`);
    let incarnation = 0;
    const newGateway = (): string => `gw-${incarnation++}`;

    for (let round = 0; round < ROUNDS; round++) {
      const host = new FakeHost();
      const actor = activeActor(host);
      /** What each live gateway holds, as the gateways themselves know it. */
      const holds = new Map<string, Set<string>>();
      for (let g = 0; g < 1 + rnd.int(4); g++) holds.set(newGateway(), new Set());
      let last = viewersEntry(actor);
      let lastActive = actor.ownEntry(ACTIVE_COUNTER);
      let lastConnections = actor.ownEntry(CONNECTIONS_COUNTER);
      const context = (step: number, op: string): string =>
        `seed ${seed} round ${round} step ${step} (${op})`;

      for (let step = 0; step < STEPS; step++) {
        const gateways = [...holds.keys()];
        const g = rnd.pick(gateways);
        const held = holds.get(g)!;
        const roll = rnd.next();
        let op: string;
        if (roll < 0.35) {
          const v = rnd.pick(VIEWERS);
          op = `join ${g} ${v}`;
          held.add(v);
          actor.presenceTransitions(g, transitionsOf([{ viewer: v, present: true }]));
        } else if (roll < 0.65) {
          op = `leave ${g}`;
          if (held.size > 0) {
            const v = rnd.pick([...held]);
            held.delete(v);
            actor.presenceTransitions(g, transitionsOf([{ viewer: v, present: false }]));
          }
        } else if (roll < 0.72) {
          // A batch retried after a lost acknowledgement: the owner sees the same ops again.
          op = `retry ${g}`;
          for (const v of held) actor.presenceTransitions(g, transitionsOf([{ viewer: v, present: true }]));
        } else if (roll < 0.78) {
          op = `resync ${g}`;
          actor.replaceGateway(g, heldAll(held));
        } else if (roll < 0.84) {
          // kill -9: its lease lapses and everything it held goes at once; its viewers reconnect elsewhere.
          op = `death ${g}`;
          holds.delete(g);
          actor.dropGateway(g);
          const heir = newGateway();
          holds.set(heir, new Set());
          for (const v of held) {
            if (rnd.chance(0.5)) {
              holds.get(heir)!.add(v);
              actor.presenceTransitions(heir, transitionsOf([{ viewer: v, present: true }]));
            }
          }
        } else if (roll < 0.88) {
          // A graceful stop: the gateway says it is down, its viewers linger for the grace window.
          op = `stop ${g}`;
          holds.delete(g);
          actor.replaceGateway(g, new Map());
          if (holds.size === 0) holds.set(newGateway(), new Set());
        } else {
          host.time += rnd.int(GRACE_MS * 1.5);
          op = `time ${host.time}`;
          actor.tick(host.time);
        }

        const entry = viewersEntry(actor);
        // Checked by hand, not with expect: 60,000 steps would spend most of their time in matchers.
        const broken =
          entry.p < last.p
            ? "p decreased"
            : entry.n < last.n
              ? "n decreased"
              : entry.p - entry.n !== actor.viewers
                ? "entry is not the presence count"
                : actor.viewers < distinct(holds)
                  ? "a held viewer is not counted"
                  : undefined;
        // Every socket here is active, and lingering viewers keep that: @active follows the viewers;
        // @connections counts what the gateways hold (one socket per viewer and gateway).
        const activeEntry = actor.ownEntry(ACTIVE_COUNTER);
        const connections = actor.ownEntry(CONNECTIONS_COUNTER);
        const also =
          activeEntry.p < lastActive.p || activeEntry.n < lastActive.n
            ? "active entry went back"
            : connections.p < lastConnections.p || connections.n < lastConnections.n
              ? "connections entry went back"
              : activeEntry.p - activeEntry.n !== actor.viewers
                ? "active is not the viewers (all active)"
                : connections.p - connections.n !== pairs(holds)
                  ? "connections are not the sockets held"
                  : undefined;
        if (broken !== undefined || also !== undefined)
          throw new Error(
            `${context(step, op)}: ${broken ?? also}: ${JSON.stringify({ last, entry, activeEntry, connections, viewers: actor.viewers, held: distinct(holds) })}`,
          );
        last = entry;
        lastActive = activeEntry;
        lastConnections = connections;
      }

      host.time += GRACE_MS;
      actor.tick(host.time);
      const entry = viewersEntry(actor);
      expect(entry.p - entry.n, context(STEPS, "after every grace")).toBe(distinct(holds));
      expect(entry.p).toBeGreaterThanOrEqual(last.p);
      expect(entry.n).toBeGreaterThanOrEqual(last.n);
    }
  });
});

/** Distinct viewers with at least one live holder. */
/** (gateway, viewer) pairs held: the sockets, one per viewer and gateway here. */
function pairs(holds: ReadonlyMap<string, ReadonlySet<string>>): number {
  let n = 0;
  for (const held of holds.values()) n += held.size;
  return n;
}

function distinct(holds: ReadonlyMap<string, ReadonlySet<string>>): number {
  const all = new Set<string>();
  for (const held of holds.values()) for (const v of held) all.add(v);
  return all.size;
}
