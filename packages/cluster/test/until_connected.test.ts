/**
 * A process starting before its NATS or Redis (untilConnected), on a manual clock: it tries again
 * with a doubling wait up to 2 s, says why at the first failure and every 10 s after, and fails at
 * once on what no wait can mend.
 */
import { BusConnectError } from "@livecount/bus";
import { StoreConnectError } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { untilConnected, type ConnectFailure } from "../src/until_connected.js";
import { INFO, WARN, logLines } from "./log_lines.js";

const refused = (): StoreConnectError =>
  new StoreConnectError("cannot connect to redis", {
    cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }),
    permanent: false,
  });
const isConnectFailure = (err: unknown): err is ConnectFailure =>
  err instanceof StoreConnectError || err instanceof BusConnectError;

describe("cluster - waiting for NATS and Redis at start", () => {
  test("cluster - a start tries again 250, 500, 1000, then every 2000 ms until it connects, and says so every 10 s", async () => {
    const clock = new ManualClock(0);
    const { logger, lines } = logLines();
    const triedAt: number[] = [];
    const connected = untilConnected(
      async () => {
        triedAt.push(clock.now());
        if (clock.now() < 20_000) throw refused();
        return "store";
      },
      // The longest wait each time: the jitter draws below it.
      { what: "Redis", isConnectFailure, logger, clock, random: () => 1 },
    );
    let result: string | undefined;
    void connected.then((r) => (result = r));
    await clock.advance(25_000);
    expect(result).toBe("store");
    expect(triedAt).toEqual([
      0, 250, 750, 1750, 3750, 5750, 7750, 9750, 11750, 13750, 15750, 17750, 19750, 21750,
    ]);
    const warnings = lines.filter((l) => l.level === WARN);
    expect(warnings.map((l) => [l.msg, l.tries, l.waitedMs])).toEqual([
      ["Redis not reachable yet; waiting for it", 1, 0],
      ["Redis not reachable yet; waiting for it", 9, 11750],
    ]);
    expect(warnings[0]!.err).toMatchObject({ message: "cannot connect to redis: connect ECONNREFUSED" });
    expect(lines.filter((l) => l.level === INFO).map((l) => [l.msg, l.waitedMs])).toEqual([
      ["Redis reached", 21750],
    ]);
  });

  test("cluster - a permanent connection failure (a refused credential, an impossible address) or any other error fails the start at once", async () => {
    const { logger, lines } = logLines();
    const options = { what: "NATS", isConnectFailure, logger, clock: new ManualClock() };
    const permanent = [
      new BusConnectError("cannot connect to NATS at nats://x", { cause: new Error("x"), permanent: true }),
      new StoreConnectError("cannot connect to redis", { cause: new Error("WRONGPASS"), permanent: true }),
      new Error("partitions must be an integer >= 1"),
    ];
    for (const err of permanent)
      await expect(untilConnected(() => Promise.reject(err), options)).rejects.toBe(err);
    expect(lines).toEqual([]);
  });
});
