import { decodeServerFrame, type CountFrame, type CountsFrame } from "@livecount/protocol";
import { describe, expect, test } from "vitest";
import { PageSetTopics, type TopicSubscriber } from "../src/page_set_topics.js";

const TS = 1_795_249_522_130;

function frame(page: string, likes: number): CountFrame {
  return { type: "count", page, viewers: 1, active: 1, connections: 1, counters: { likes }, ts: TS };
}

/** A socket's topics, as uWS would hold them. */
function socket(): TopicSubscriber & { topics: Set<string> } {
  const topics = new Set<string>();
  return { topics, subscribe: (t) => topics.add(t), unsubscribe: (t) => topics.delete(t) };
}

/** Publishes `frames` and returns what went to each topic, decoded. */
function publish(sets: PageSetTopics, frames: CountFrame[]): Map<string, CountsFrame> {
  const sent = new Map<string, CountsFrame>();
  const n = sets.publish(TS, frames, (topic, data, isBinary) => {
    expect(sent.has(topic)).toBe(false);
    sent.set(topic, decodeServerFrame(data, isBinary ? "msgpack" : "json") as CountsFrame);
  });
  expect(n).toBe(sent.size);
  return sent;
}

describe("gateway - page sets of counts sockets", () => {
  test("gateway - sockets watching the same pages share one set, in whatever order they took them", () => {
    const sets = new PageSetTopics();
    const a = socket();
    const b = socket();
    const setA = sets.move(a, undefined, ["p2", "p1"], "json")!;
    const setB = sets.move(b, undefined, ["p1", "p2"], "json")!;
    expect(setB).toBe(setA);
    expect(sets.size).toBe(1);
    expect([...a.topics]).toEqual([setA.topic]);
    // The same pages in msgpack are another set: their frames are binary.
    const c = socket();
    expect(sets.move(c, undefined, ["p1", "p2"], "msgpack")).not.toBe(setA);
    expect(sets.size).toBe(2);
  });

  test("gateway - one publish sends each set one frame with exactly its changed pages", () => {
    const sets = new PageSetTopics();
    const s12 = sets.move(socket(), undefined, ["p1", "p2"], "json")!;
    const s23 = sets.move(socket(), undefined, ["p2", "p3"], "json")!;
    const s4 = sets.move(socket(), undefined, ["p4"], "msgpack")!;
    const sent = publish(sets, [frame("p1", 1), frame("p2", 2), frame("p4", 4)]);
    expect([...sent.keys()].sort()).toEqual([s12.topic, s23.topic, s4.topic].sort());
    expect(Object.keys(sent.get(s12.topic)!.pages)).toEqual(["p1", "p2"]);
    expect(Object.keys(sent.get(s23.topic)!.pages)).toEqual(["p2"]);
    expect(sent.get(s4.topic)!.pages).toEqual({
      p4: { viewers: 1, active: 1, connections: 1, counters: { likes: 4 } },
    });
    expect(sent.get(s12.topic)!.ts).toBe(TS);
    // A window without a change of a set's pages sends it nothing; nothing is left over from before.
    const next = publish(sets, [frame("p3", 3)]);
    expect([...next.keys()]).toEqual([s23.topic]);
    expect(Object.keys(next.get(s23.topic)!.pages)).toEqual(["p3"]);
  });

  test("gateway - a socket moving to other pages leaves its set, which is forgotten with its last socket", () => {
    const sets = new PageSetTopics();
    const a = socket();
    const b = socket();
    const shared = sets.move(a, undefined, ["p1"], "json")!;
    sets.move(b, undefined, ["p1"], "json");
    const moved = sets.move(a, shared, ["p1", "p2"], "json")!;
    expect([...a.topics]).toEqual([moved.topic]);
    expect(sets.size).toBe(2);
    // b still gets p1 through the shared set; a gets it through its new one.
    expect([...publish(sets, [frame("p1", 1)]).keys()].sort()).toEqual([shared.topic, moved.topic].sort());
    // The same pages again: nothing changes.
    expect(sets.move(a, moved, ["p2", "p1"], "json")).toBe(moved);
    expect([...a.topics]).toEqual([moved.topic]);
    // No pages left: no set; the last socket of a set takes it away.
    expect(sets.move(a, moved, [], "json")).toBeUndefined();
    expect(a.topics.size).toBe(0);
    sets.leave(shared);
    expect(sets.size).toBe(0);
    expect(publish(sets, [frame("p1", 2), frame("p2", 2)]).size).toBe(0);
  });
});
