import { DCS_SUBJECT, MemoryBus } from "@livecount/bus";
import { encodeMessage } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { Registry } from "prom-client";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { registerDcMetrics } from "../src/dc_metrics.js";
import { DcLiveness } from "../src/dc_liveness.js";

const LEASE_MS = 1_000;

/** dc1's liveness on an in-memory bus with a manual clock; `heard` publishes another DC's beat. */
function setUp() {
  const clock = new ManualClock();
  const bus = new MemoryBus({ clock });
  const liveness = new DcLiveness({
    bus,
    clock,
    logger: silentLogger,
    dc: "dc1",
    leaseMs: LEASE_MS,
    heartbeatMs: 100,
  });
  liveness.start();
  const heard = (dc: string): void =>
    bus.publish(DCS_SUBJECT, encodeMessage({ type: "dc", dc, node: "n", seq: 1, leaseMs: LEASE_MS }));
  /** A registry with the DC metrics, expecting `expected` DCs. */
  const metrics = (expected?: readonly string[]): Registry => {
    const registry = new Registry();
    registerDcMetrics(registry, "livecount_test", liveness, () => clock.now(), expected);
    return registry;
  };
  const stop = async (): Promise<void> => {
    liveness.stop();
    await bus.close();
  };
  return { clock, heard, metrics, stop };
}

/** One metric's samples by their `dc` label. */
async function sample(registry: Registry, name: string): Promise<Record<string, number>> {
  const { values } = await registry.getSingleMetric(name)!.get();
  return Object.fromEntries(values.map((v) => [String(v.labels.dc), v.value]));
}

describe("cluster - data center metrics", () => {
  test("cluster - dc_up is 1 for a DC heard within its lease, 0 once it is silent, and 0 for an expected DC never heard; silence counts seconds", async () => {
    const { clock, heard, metrics, stop } = setUp();
    const registry = metrics(["dc2", "dc3"]);
    heard("dc2");
    await clock.advance(250);
    expect(await sample(registry, "livecount_test_dc_up")).toEqual({ dc2: 1, dc3: 0 });
    expect(await sample(registry, "livecount_test_dc_silence_seconds")).toEqual({ dc2: 0.25 });
    await clock.advance(LEASE_MS);
    expect(await sample(registry, "livecount_test_dc_up")).toEqual({ dc2: 0, dc3: 0 });
    await stop();
  });

  test("cluster - dc_up lists every DC heard, each live on its own, whether or not some are expected", async () => {
    const { clock, heard, metrics, stop } = setUp();
    const registry = metrics();
    // Expecting one of them changes nothing for either.
    const expecting = metrics(["dc2"]);
    for (const dc of ["dc2", "dc3"]) heard(dc);
    await clock.advance(250);
    expect(await sample(registry, "livecount_test_dc_up")).toEqual({ dc2: 1, dc3: 1 });
    expect(await sample(expecting, "livecount_test_dc_up")).toEqual({ dc2: 1, dc3: 1 });
    await stop();
  });
});
