import type { IncrementRequest, NodeReply } from "@livecount/protocol";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { RecentKeys, incrementChange } from "../src/recent_keys.js";

const MEMORY_MS = 3_000;

/** A queued increment whose reply the test reads. */
function pending(key: string, delta = 1, page = "p1") {
  const request: IncrementRequest = { type: "increment", page, counter: "likes", delta, key };
  const got: NodeReply[] = [];
  return { request, resolve: (reply: NodeReply) => got.push(reply), got };
}

function answered(p: ReturnType<typeof pending>, value: number): { pending: typeof p; reply: NodeReply } {
  const { page, counter } = p.request;
  return { pending: p, reply: { type: "incremented", page, counter, value, updatedAt: 5, duplicate: false } };
}

describe("counter - recent keys", () => {
  function setUp(maxKeys = 100) {
    const clock = new ManualClock();
    return { clock, keys: new RecentKeys({ clock, memoryMs: MEMORY_MS, maxKeys }) };
  }

  test("counter - a retry within the memory gets the answer replayed; another change under the key is a conflict; other keys go on", async () => {
    const { clock, keys } = setUp();
    const first = pending("k1");
    keys.remember([answered(first, 7)], incrementChange);
    await clock.advance(MEMORY_MS - 1);
    const [retry, other, conflict] = [pending("k1"), pending("k2"), pending("k1", 2)];
    const samePageElsewhere = pending("k1", 1, "p2");
    expect(keys.answer([retry, other, conflict, samePageElsewhere], incrementChange)).toEqual([
      other,
      samePageElsewhere,
    ]);
    expect(retry.got).toEqual([{ ...answered(first, 7).reply, duplicate: true }]);
    expect(conflict.got).toMatchObject([{ type: "error", code: "idempotency_conflict" }]);
  });

  test("counter - a key is forgotten once the memory has passed, and errors are never remembered", async () => {
    const { clock, keys } = setUp();
    const failed = pending("k2");
    keys.remember(
      [
        answered(pending("k1"), 1),
        { pending: failed, reply: { type: "error", code: "unavailable", message: "x" } },
      ],
      incrementChange,
    );
    expect(keys.size).toBe(1);
    await clock.advance(MEMORY_MS);
    const retry = pending("k1");
    expect(keys.answer([retry], incrementChange)).toEqual([retry]);
    expect(keys.size).toBe(0);
  });

  test("counter - past the cap the oldest key is forgotten first", () => {
    const { keys } = setUp(2);
    keys.remember(
      ["k1", "k2", "k3"].map((k, i) => answered(pending(k), i)),
      incrementChange,
    );
    expect(keys.size).toBe(2);
    const [k1, k3] = [pending("k1"), pending("k3")];
    expect(keys.answer([k1, k3], incrementChange)).toEqual([k1]);
    expect(k3.got).toHaveLength(1);
  });
});
