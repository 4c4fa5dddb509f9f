import { DCS_SUBJECT, MemoryBus } from "@livecount/bus";
import { encodeMessage } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { Registry } from "prom-client";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { registerDcMetrics } from "../src/dc_metrics.js";
import { DcLiveness } from "../src/dc_liveness.js";

const LEASE_MS = 1_000;

describe("cluster - data center metrics", () => {
  test("cluster - dc_up is 1 for a DC heard within its lease, 0 once it is silent, and 0 for an expected DC never heard; silence counts seconds", async () => {
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
    const registry = new Registry();
    registerDcMetrics(registry, "livecount_test", liveness, () => clock.now(), ["dc2", "dc3"]);
    const sample = async (name: string): Promise<Record<string, number>> => {
      const metric = registry.getSingleMetric(name)!;
      const { values } = await metric.get();
      return Object.fromEntries(values.map((v) => [String(v.labels.dc), v.value]));
    };
    bus.publish(DCS_SUBJECT, encodeMessage({ type: "dc", dc: "dc2", node: "n", seq: 1, leaseMs: LEASE_MS }));
    await clock.advance(250);
    expect(await sample("livecount_test_dc_up")).toEqual({ dc2: 1, dc3: 0 });
    expect(await sample("livecount_test_dc_silence_seconds")).toEqual({ dc2: 0.25 });
    await clock.advance(LEASE_MS);
    expect(await sample("livecount_test_dc_up")).toEqual({ dc2: 0, dc3: 0 });
    liveness.stop();
    await bus.close();
  });

  test("cluster - dc_up lists every DC heard, each live on its own, whether or not some are expected", async () => {
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
    const registry = new Registry();
    registerDcMetrics(registry, "livecount_test", liveness, () => clock.now());
    // Expecting one of them changes nothing for either.
    const expecting = new Registry();
    registerDcMetrics(expecting, "livecount_test", liveness, () => clock.now(), ["dc2"]);
    for (const dc of ["dc2", "dc3"])
      bus.publish(DCS_SUBJECT, encodeMessage({ type: "dc", dc, node: "n", seq: 1, leaseMs: LEASE_MS }));
    await clock.advance(250);
    const { values } = await registry.getSingleMetric("livecount_test_dc_up")!.get();
    expect(Object.fromEntries(values.map((v) => [String(v.labels.dc), v.value]))).toEqual({ dc2: 1, dc3: 1 });
    const expected = await expecting.getSingleMetric("livecount_test_dc_up")!.get();
    expect(Object.fromEntries(expected.values.map((v) => [String(v.labels.dc), v.value]))).toEqual({
      dc2: 1,
      dc3: 1,
    });
    liveness.stop();
    await bus.close();
  });
});
