import { describe, expect, test } from "vitest";
import { PageActor, type ActorHost } from "../src/page_actor.js";
import { DurableEntries, errorReply, parsePayload } from "../src/replies.js";
import { VisitorHash } from "../src/visitor_hash.js";

const host: ActorHost = {
  dc: "dc1",
  graceMs: 0,
  visitorHash: new VisitorHash("test-visitor-key-0123"),
  now: () => 0,
  monotonic: () => 0,
  markDirty: () => {},
  wakeAt: () => {},
  presenceFloor: () => 0,
  presenceRaised: () => {},
  purgeFloor: () => 0,
};

describe("counter - replies", () => {
  test("counter - an error reply carries the stable code and its wire message unless given one", () => {
    expect(errorReply("unavailable")).toEqual({
      type: "error",
      code: "unavailable",
      message: "service temporarily unavailable",
    });
    expect(errorReply("internal", "store answered nonsense")).toEqual({
      type: "error",
      code: "internal",
      message: "store answered nonsense",
    });
  });

  test("counter - a stored answer is read back only when it is an object whose fields are all safe integers", () => {
    const fields = ["value", "updatedAt"] as const;
    expect(parsePayload('{"value":3,"updatedAt":7,"extra":"x"}', fields)).toMatchObject({
      value: 3,
      updatedAt: 7,
    });
    for (const payload of [
      "{not json",
      "",
      "null",
      "5",
      '"value"',
      "[]",
      '{"value":3}',
      '{"updatedAt":7}',
      '{"value":3.5,"updatedAt":7}',
      '{"value":"3","updatedAt":7}',
      `{"value":${2 ** 53},"updatedAt":7}`,
    ]) {
      expect(parsePayload(payload, fields), payload).toBeUndefined();
    }
  });

  test("counter - durable entries go out once per page and data center, the latest entry of each counter", () => {
    const p = new PageActor(host, "p", 3, 0);
    const q = new PageActor(host, "q", 5, 0);
    const durable = new DurableEntries();
    durable.add(p, "dc1", "likes", { p: 1, n: 0 });
    durable.add(q, "dc1", "likes", { p: 7, n: 0 });
    durable.add(p, "dc1", "likes", { p: 2, n: 0 });
    durable.add(p, "dc1", "stars", { p: 4, n: 1 });
    durable.add(p, "dc2", "likes", { p: 9, n: 0 });
    expect(durable.updates()).toEqual([
      {
        page: "p",
        partition: 3,
        dc: "dc1",
        counters: new Map(Object.entries({ likes: { p: 2, n: 0 }, stars: { p: 4, n: 1 } })),
      },
      { page: "q", partition: 5, dc: "dc1", counters: new Map([["likes", { p: 7, n: 0 }]]) },
      { page: "p", partition: 3, dc: "dc2", counters: new Map([["likes", { p: 9, n: 0 }]]) },
    ]);
    expect(new DurableEntries().updates()).toEqual([]);
  });

  test("counter - a counter named __proto__ stays a counter in a durable update", () => {
    const durable = new DurableEntries();
    durable.add(new PageActor(host, "p", 3, 0), "dc1", "__proto__", { p: 1, n: 0 });
    const [update] = durable.updates();
    expect([...update!.counters.keys()]).toEqual(["__proto__"]);
  });
});
