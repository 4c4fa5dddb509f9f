import { describe, expect, test } from "vitest";
import { ConcurrencyLimit } from "../src/concurrency_limit.js";

/** A task that settles when told, recording when it started. */
function gate(
  started: string[],
  name: string,
): { task: () => Promise<string>; open: () => void; fail: () => void } {
  let open!: () => void;
  let fail!: () => void;
  const done = new Promise<string>((resolve, reject) => {
    open = () => resolve(name);
    fail = () => reject(new Error(name));
  });
  return {
    task: () => {
      started.push(name);
      return done;
    },
    open,
    fail,
  };
}

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe("runtime - concurrency limit", () => {
  test("runtime - runs at most `limit` tasks at once, the others in the order given", async () => {
    const limit = new ConcurrencyLimit(2);
    const started: string[] = [];
    const gates = ["a", "b", "c", "d"].map((name) => gate(started, name));
    const results = gates.map((g) => limit.run(g.task));
    await turn();
    expect(started).toEqual(["a", "b"]);
    expect([limit.running, limit.waiting]).toEqual([2, 2]);
    gates[1]!.open();
    await turn();
    expect(started).toEqual(["a", "b", "c"]);
    expect([limit.running, limit.waiting]).toEqual([2, 1]);
    gates[0]!.open();
    gates[2]!.open();
    gates[3]!.open();
    expect(await Promise.all(results)).toEqual(["a", "b", "c", "d"]);
    expect([limit.running, limit.waiting]).toEqual([0, 0]);
  });

  test("runtime - a failed task passes its turn on and fails alone", async () => {
    const limit = new ConcurrencyLimit(1);
    const started: string[] = [];
    const [a, b] = [gate(started, "a"), gate(started, "b")];
    const first = limit.run(a.task);
    const second = limit.run(b.task);
    a.fail();
    await expect(first).rejects.toThrow("a");
    await turn();
    expect(started).toEqual(["a", "b"]);
    b.open();
    expect(await second).toBe("b");
    expect(limit.running).toBe(0);
  });

  test("runtime - a limit must be a positive integer", () => {
    expect(() => new ConcurrencyLimit(0)).toThrow(RangeError);
    expect(() => new ConcurrencyLimit(0)).toThrow("limit must be a positive integer, got 0");
    expect(() => new ConcurrencyLimit(1.5)).toThrow(RangeError);
    expect(new ConcurrencyLimit(1).running).toBe(0);
  });
});
