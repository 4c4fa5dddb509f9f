import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { sleep, systemClock, yieldTurn } from "../src/clock.js";

describe("runtime - clock", () => {
  test("runtime - the system clock tells epoch milliseconds", () => {
    const before = Date.now();
    const now = systemClock.now();
    expect(now).toBeGreaterThanOrEqual(before);
    expect(now).toBeLessThanOrEqual(Date.now());
  });

  test("runtime - a system timer fires after its delay and never keeps the process alive", async () => {
    const start = Date.now();
    let fired = 0;
    let handle: ReturnType<typeof setTimeout> | undefined;
    await new Promise<void>((resolve) => {
      handle = systemClock.setTimeout(() => {
        fired = Date.now();
        resolve();
      }, 20) as ReturnType<typeof setTimeout>;
      expect(handle.hasRef()).toBe(false);
    });
    expect(fired - start).toBeGreaterThanOrEqual(19);
  });

  test("runtime - a cleared system timer never fires", async () => {
    let fired = false;
    const handle = systemClock.setTimeout(() => (fired = true), 5);
    systemClock.clearTimeout(handle);
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(fired).toBe(false);
  });

  test("runtime - deferred work runs after the current turn, once its promises settled", async () => {
    const order: string[] = [];
    const deferred = new Promise<void>((resolve) =>
      systemClock.defer(() => {
        order.push("deferred");
        resolve();
      }),
    );
    void Promise.resolve().then(() => order.push("microtask"));
    order.push("sync");
    await deferred;
    expect(order).toEqual(["sync", "microtask", "deferred"]);
  });

  test("runtime - sleep resolves after that much clock time, not before", async () => {
    const clock = new ManualClock();
    let woke = false;
    void sleep(clock, 1_000).then(() => (woke = true));
    await clock.advance(999);
    expect(woke).toBe(false);
    await clock.advance(1);
    expect(woke).toBe(true);
  });

  test("runtime - yielding a turn resolves at the clock's next deferral point", async () => {
    const clock = new ManualClock();
    let resumed = false;
    void yieldTurn(clock).then(() => (resumed = true));
    await Promise.resolve();
    expect(resumed).toBe(false);
    await clock.advance(0);
    expect(resumed).toBe(true);
  });
});
