import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Coalescer } from "../src/coalescer.js";

describe("runtime - coalescer", () => {
  test("runtime - a lone request flushes at once; a burst flushes once per window on the trailing edge", async () => {
    const clock = new ManualClock();
    const flushes: number[] = [];
    const c = new Coalescer(clock, 50, () => void flushes.push(clock.now()));
    const t0 = clock.now();
    c.request();
    await clock.advance(0);
    expect(flushes).toEqual([t0]);
    for (let i = 0; i < 20; i++) {
      c.request();
      await clock.advance(5);
    }
    await clock.advance(100);
    expect(flushes).toEqual([t0, t0 + 50, t0 + 100]);
  });

  test("runtime - after the wall clock steps back, a request still waits a window at most", async () => {
    const clock = new ManualClock();
    const flushes: number[] = [];
    const c = new Coalescer(clock, 50, () => void flushes.push(clock.now()));
    c.request();
    await clock.advance(0);
    // A minute back: the last flush's start looks a minute ahead of now.
    clock.jump(-60_000);
    const asked = clock.now();
    c.request();
    await clock.advance(50);
    expect(flushes.slice(1)).toEqual([asked + 50]);
  });

  test("runtime - flushes never overlap: a request during a slow flush runs after it, once", async () => {
    const clock = new ManualClock();
    let running = 0;
    let overlapped = false;
    let release!: () => void;
    let calls = 0;
    const c = new Coalescer(clock, 10, async () => {
      calls++;
      overlapped ||= running > 0;
      running++;
      if (calls === 1) await new Promise<void>((r) => (release = r));
      running--;
    });
    c.request();
    await clock.advance(0);
    c.request();
    c.request();
    await clock.advance(100);
    expect(calls).toBe(1);
    release();
    await clock.advance(100);
    expect(calls).toBe(2);
    expect(overlapped).toBe(false);
  });

  test("runtime - drain runs what is pending now and waits for the running flush first", async () => {
    const clock = new ManualClock();
    const order: string[] = [];
    let release!: () => void;
    const c = new Coalescer(clock, 1_000, async () => {
      order.push("start");
      if (order.length === 1) await new Promise<void>((r) => (release = r));
      order.push("end");
    });
    c.request();
    await clock.advance(0);
    c.request();
    const drained = c.drain().then(() => order.push("drained"));
    await clock.advance(0);
    release();
    await drained;
    expect(order).toEqual(["start", "end", "start", "end", "drained"]);
  });

  test("runtime - a failing flush is reported and does not stop later flushes", async () => {
    const clock = new ManualClock();
    const errors: unknown[] = [];
    let n = 0;
    const c = new Coalescer(
      clock,
      10,
      () => {
        if (n++ === 0) throw new Error("boom");
      },
      (err) => errors.push(err),
    );
    c.request();
    await clock.advance(0);
    c.request();
    await clock.advance(10);
    expect(n).toBe(2);
    expect(errors).toHaveLength(1);
  });

  test("runtime - a closed coalescer flushes nothing more", async () => {
    const clock = new ManualClock();
    let n = 0;
    const c = new Coalescer(clock, 10, () => void n++);
    c.request();
    c.close();
    await clock.advance(100);
    c.request();
    await clock.advance(100);
    expect(n).toBe(0);
  });
  test("runtime - a request made synchronously inside a flush runs once, after it, in the next window", async () => {
    const clock = new ManualClock();
    const starts: number[] = [];
    const c: Coalescer = new Coalescer(clock, 50, () => {
      starts.push(clock.now());
      if (starts.length === 1) c.request();
    });
    const t0 = clock.now();
    c.request();
    await clock.advance(200);
    expect(starts).toEqual([t0, t0 + 50]);
  });

  test("runtime - two drains at once both wait for the same flushes and run each once", async () => {
    const clock = new ManualClock();
    let runs = 0;
    let release!: () => void;
    const c = new Coalescer(clock, 1_000, async () => {
      runs++;
      if (runs === 1) await new Promise<void>((r) => (release = r));
    });
    c.request();
    await clock.advance(0);
    c.request();
    let drained = 0;
    const both = Promise.all([c.drain(), c.drain()]).then(() => (drained = 2));
    await clock.advance(0);
    expect(drained).toBe(0);
    release();
    await both;
    expect(runs).toBe(2);
  });

  test("runtime - drain after a failed flush runs what the failure asked for again", async () => {
    const clock = new ManualClock();
    const errors: unknown[] = [];
    let runs = 0;
    const c: Coalescer = new Coalescer(
      clock,
      1_000,
      () => {
        if (runs++ === 0) {
          c.request(); // retry on the next window, as the counter node's flush does
          throw new Error("store down");
        }
      },
      (err) => errors.push(err),
    );
    c.request();
    await clock.advance(0);
    expect(runs).toBe(1);
    await c.drain();
    expect(runs).toBe(2);
    expect(errors).toHaveLength(1);
  });

  test("runtime - draining with nothing asked for flushes nothing", async () => {
    const clock = new ManualClock();
    let n = 0;
    const c = new Coalescer(clock, 10, () => void n++);
    await c.drain();
    await clock.advance(100);
    expect(n).toBe(0);
  });

  test("runtime - drain starts what is pending before it returns", async () => {
    const clock = new ManualClock();
    let n = 0;
    const c = new Coalescer(clock, 1_000, () => void n++);
    c.request();
    const drained = c.drain();
    expect(n).toBe(1);
    await drained;
  });

  test("runtime - closing cancels the trailing flush of a burst", async () => {
    const clock = new ManualClock();
    let n = 0;
    const c = new Coalescer(clock, 50, () => void n++);
    c.request();
    await clock.advance(0);
    c.request();
    c.request();
    c.close();
    await clock.advance(200);
    expect(n).toBe(1);
  });

  test("runtime - a request made inside a flush that outlasts the window never overlaps it", async () => {
    const clock = new ManualClock();
    let running = 0;
    let overlapped = false;
    let calls = 0;
    let release!: () => void;
    const c: Coalescer = new Coalescer(clock, 50, async () => {
      calls++;
      overlapped ||= running > 0;
      running++;
      if (calls === 1) {
        c.request();
        await new Promise<void>((r) => (release = r));
      }
      running--;
    });
    c.request();
    await clock.advance(200);
    expect(calls).toBe(1);
    release();
    await clock.advance(200);
    expect(calls).toBe(2);
    expect(overlapped).toBe(false);
  });
});
