import { describe, expect, it } from "vitest";
import type { Entries } from "@livecount/crdt";
import {
  VIEWERS_COUNTER,
  activityOf,
  deletedAt,
  isInternalCounter,
  isTombstoneCounter,
  tombstoneOf,
  valueOf,
  visibleCounters,
} from "../src/index.js";

/** Readers see these: the names of visible counters with their values. */
function shown(counters: Record<string, Entries>): Record<string, number> {
  return Object.fromEntries(
    visibleCounters(Object.entries(counters), (e) => e).map(([name, e]) => [name, valueOf(e)]),
  );
}

describe("visibility", () => {
  it("visibility - internal counters are never shown; public ones always are without a tombstone", () => {
    expect(
      shown({
        [VIEWERS_COUNTER]: { dc1: { p: 4, n: 1 } },
        likes: { dc1: { p: 3, n: 1 }, dc2: { p: 2, n: 0 } },
        "a:b.c-d_e": {},
        __proto__: { dc1: { p: 1, n: 0 } },
      } as Record<string, Entries>),
    ).toEqual({ likes: 4, "a:b.c-d_e": 0 });
    expect(isInternalCounter(VIEWERS_COUNTER)).toBe(true);
    expect(isInternalCounter(tombstoneOf("likes"))).toBe(true);
    expect(isInternalCounter("likes")).toBe(false);
  });

  it("visibility - a delete hides the counter until any later change, which counts from zero", () => {
    // likes was 5 in dc1; the delete cancelled it (n += 5) and recorded activity 10.
    const deleted = { likes: { dc1: { p: 5, n: 5 } }, [tombstoneOf("likes")]: { dc1: { p: 10, n: 0 } } };
    expect(shown(deleted)).toEqual({});
    expect(shown({ ...deleted, likes: { dc1: { p: 6, n: 5 } } })).toEqual({ likes: 1 });
    // A decrement revives it too: something happened after the delete.
    expect(shown({ ...deleted, likes: { dc1: { p: 5, n: 6 } } })).toEqual({ likes: -1 });
  });

  it("visibility - an increment made concurrently in another data center survives a delete (add-wins)", () => {
    const merged: Record<string, Entries> = {
      likes: { dc1: { p: 5, n: 5 }, dc2: { p: 2, n: 0 } },
      [tombstoneOf("likes")]: { dc1: { p: 10, n: 0 } },
    };
    expect(shown(merged)).toEqual({ likes: 2 });
  });

  it("visibility - the latest delete anywhere counts: the largest tombstone over data centers", () => {
    const likes = { dc1: { p: 5, n: 5 }, dc2: { p: 2, n: 2 } };
    const tombstone = { dc1: { p: 10, n: 0 }, dc2: { p: 14, n: 0 } };
    const counters = { likes, [tombstoneOf("likes")]: tombstone };
    expect(deletedAt(tombstone)).toBe(14);
    expect(activityOf(likes)).toBe(14);
    expect(shown(counters)).toEqual({});
  });

  it("visibility - a tombstone seen before the entries it covers still hides the counter", () => {
    expect(
      shown({ likes: { dc1: { p: 5, n: 0 } }, [tombstoneOf("likes")]: { dc1: { p: 10, n: 0 } } }),
    ).toEqual({});
  });

  it("visibility - a tombstone of one counter leaves the others alone and never shows itself", () => {
    const counters = {
      likes: { dc1: { p: 1, n: 1 } },
      shares: { dc1: { p: 3, n: 0 } },
      [tombstoneOf("likes")]: { dc1: { p: 2, n: 0 } },
      [tombstoneOf("gone")]: { dc1: { p: 7, n: 0 } },
    };
    expect(shown(counters)).toEqual({ shares: 3 });
    expect(isTombstoneCounter(tombstoneOf("a:b.c-d_e"))).toBe(true);
    expect(isTombstoneCounter("@del:")).toBe(false);
    expect(isTombstoneCounter("likes")).toBe(false);
  });

  it("visibility - only counters that have a tombstone are inspected", () => {
    const inspected: string[] = [];
    visibleCounters(
      [
        ["likes", "L"],
        ["shares", "S"],
        [tombstoneOf("likes"), "T"],
      ],
      (c) => {
        inspected.push(c);
        return {};
      },
    );
    expect(inspected.sort()).toEqual(["L", "T"]);
  });

  it("visibility - only a string can be a tombstone counter", () => {
    for (const v of [5, null, undefined, ["@del:likes"]]) expect(isTombstoneCounter(v)).toBe(false);
  });

  it("visibility - an internal counter that is not a tombstone hides nothing", () => {
    const viewers: Entries = { dc1: { p: 50, n: 0 } };
    const ers: Entries = { dc1: { p: 1, n: 0 } };
    const shown = visibleCounters(
      [
        ["ers", ers],
        ["@viewers", viewers],
      ],
      (e) => e,
    );
    expect(shown.map(([name]) => name)).toEqual(["ers"]);
  });
});
