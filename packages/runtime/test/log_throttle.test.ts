import { Writable } from "node:stream";
import { pino } from "pino";
import { describe, expect, test } from "vitest";
import { LogThrottle } from "../src/log_throttle.js";

/** A pino logger writing JSON lines into `lines`. */
function capture(lines: Record<string, unknown>[]): pino.Logger {
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(JSON.parse(chunk.toString("utf8")) as Record<string, unknown>);
      done();
    },
  });
  return pino({ level: "info" }, sink);
}

describe("runtime - log throttle", () => {
  test("runtime - the first line of a kind is written, repeats within the interval are counted, the next one says how many", () => {
    let now = 1_000;
    const throttle = new LogThrottle(10_000, () => now);
    expect(throttle.admit("request failed")).toBe(0);
    for (let i = 0; i < 5; i++) expect(throttle.admit("request failed")).toBeUndefined();
    now += 9_999;
    expect(throttle.admit("request failed")).toBeUndefined();
    now += 1;
    expect(throttle.admit("request failed")).toBe(6);
    now += 10_000;
    expect(throttle.admit("request failed")).toBe(0);
  });

  test("runtime - kinds are throttled apart: one flooding kind does not hide another", () => {
    const throttle = new LogThrottle(10_000, () => 0);
    expect(throttle.admit("a")).toBe(0);
    expect(throttle.admit("a")).toBeUndefined();
    expect(throttle.admit("b")).toBe(0);
  });

  test("runtime - 10,000 failures in one interval write one line; the next interval's line carries the count", () => {
    let now = 0;
    const lines: Record<string, unknown>[] = [];
    const logger = capture(lines);
    const throttle = new LogThrottle(10_000, () => now);
    for (let i = 0; i < 10_000; i++)
      throttle.log(logger, "error", { err: new Error("store stalled"), page: `p${i}` }, "page load failed");
    now = 10_000;
    throttle.log(logger, "error", { page: "last" }, "page load failed");
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ level: 50, msg: "page load failed", page: "p0" });
    expect(lines[0]).not.toHaveProperty("suppressed");
    expect(lines[1]).toMatchObject({ msg: "page load failed", page: "last", suppressed: 9_999 });
  });
});
