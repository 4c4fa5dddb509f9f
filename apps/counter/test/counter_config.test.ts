import { ConfigError } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import {
  DC_HEARTBEAT_WARNING,
  DEFAULT_VISITOR_KEY,
  DEFAULT_VISITOR_KEY_WARNING,
  MEMORY_STORE_WARNING,
  readCounterConfig,
  startWarnings,
  type CounterConfig,
} from "../src/counter_config.js";
import { expectIntBounds, type IntSetting } from "../../../test/support/int_settings.js";

/** Integer settings not tested on their own below: variable, field, default, least, most (in the variable's unit). */
const INT_SETTINGS: ReadonlyArray<IntSetting<keyof CounterConfig>> = [
  ["LIVECOUNT_PORT", "port", 8081, 0, 65535],
  ["LIVECOUNT_PARTITION_LEASE_MS", "partitionLeaseMs", 8000, 1000, undefined],
  ["LIVECOUNT_PASSIVATE_MS", "passivateMs", 60000, 1000, undefined],
  ["LIVECOUNT_IDEMPOTENCY_MEMORY_MS", "idempotencyMemoryMs", 3000, 0, 60_000],
  ["LIVECOUNT_IDEMPOTENCY_MEMORY_KEYS", "idempotencyMemoryKeys", 100_000, 0, undefined],
  ["LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS", "idempotencyImportMaxKeys", 100_000, 0, undefined],
  ["LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS", "idempotencyResendMaxKeys", 100_000, 0, undefined],
  ["LIVECOUNT_MAX_ACTORS", "maxActors", 100_000, 100, undefined],
];

describe("counter - config", () => {
  test.each(INT_SETTINGS)(
    "counter - %s: its default, its bounds taken, one past each refused",
    (...setting) => expectIntBounds(readCounterConfig, setting),
  );

  test("counter - LIVECOUNT_IDEMPOTENCY_TTL_S and LIVECOUNT_EMPTY_PAGE_TTL_S: a day and an hour by default, at least a second, held in ms", () => {
    expect(readCounterConfig({}).idempotencyTtlMs).toBe(86_400_000);
    expect(readCounterConfig({}).emptyPageTtlMs).toBe(3_600_000);
    expect(readCounterConfig({ LIVECOUNT_IDEMPOTENCY_TTL_S: "1" }).idempotencyTtlMs).toBe(1000);
    expect(readCounterConfig({ LIVECOUNT_EMPTY_PAGE_TTL_S: "1" }).emptyPageTtlMs).toBe(1000);
    expect(() => readCounterConfig({ LIVECOUNT_IDEMPOTENCY_TTL_S: "0" })).toThrow(ConfigError);
    expect(() => readCounterConfig({ LIVECOUNT_EMPTY_PAGE_TTL_S: "0" })).toThrow(ConfigError);
  });

  test("counter - LIVECOUNT_VISITOR_KEY: the development key by default, a secret of 16 characters or more", () => {
    expect(readCounterConfig({}).visitorKey).toBe(DEFAULT_VISITOR_KEY);
    expect(readCounterConfig({ LIVECOUNT_VISITOR_KEY: "" }).visitorKey).toBe(DEFAULT_VISITOR_KEY);
    expect(readCounterConfig({ LIVECOUNT_VISITOR_KEY: "k".repeat(16) }).visitorKey).toBe("k".repeat(16));
    expect(() => readCounterConfig({ LIVECOUNT_VISITOR_KEY: "k".repeat(15) })).toThrow(ConfigError);
  });

  test("counter - start warnings: counters in memory, and the public visitor key; none when both are set", () => {
    expect(startWarnings(readCounterConfig({}))).toEqual([MEMORY_STORE_WARNING, DEFAULT_VISITOR_KEY_WARNING]);
    const set = { LIVECOUNT_REDIS_URL: "redis://127.0.0.1:6379", LIVECOUNT_VISITOR_KEY: "k".repeat(16) };
    expect(startWarnings(readCounterConfig(set))).toEqual([]);
    expect(startWarnings(readCounterConfig({ ...set, LIVECOUNT_REDIS_URL: "" }))).toEqual([
      MEMORY_STORE_WARNING,
    ]);
  });

  test("counter - a DC heartbeat too long for the gateway lease is warned about at start: a NATS outage would pass for dead gateways", () => {
    const warnings = (env: Record<string, string>): string[] =>
      startWarnings(
        readCounterConfig({
          LIVECOUNT_REDIS_URL: "redis://127.0.0.1:6379",
          LIVECOUNT_VISITOR_KEY: "k".repeat(16),
          LIVECOUNT_NATS_URL: "nats://127.0.0.1:4222",
          ...env,
        }),
      );
    const slow = { LIVECOUNT_DC_HEARTBEAT_MS: "1000" };
    // The defaults: 250 ms heartbeats, a 10 s lease.
    expect(warnings({})).toEqual([]);
    // A silence is noticed 3 heartbeats and a sweep (250 ms) after it starts at the latest, 3,250 ms;
    // a lease can lapse two thirds of it into the silence: 4,876 ms leaves room, 4,875 does not.
    expect(warnings({ ...slow, LIVECOUNT_GATEWAY_LEASE_MS: "4876" })).toEqual([]);
    expect(warnings({ ...slow, LIVECOUNT_GATEWAY_LEASE_MS: "4875" })).toEqual([DC_HEARTBEAT_WARNING]);
    // The in-memory bus (no NATS URL) has no outage of its own.
    expect(warnings({ ...slow, LIVECOUNT_GATEWAY_LEASE_MS: "4875", LIVECOUNT_NATS_URL: "" })).toEqual([]);
  });

  test("counter - LIVECOUNT_FLUSH_MAX_WRITES: 20000 entries by default, at least 100", () => {
    expect(readCounterConfig({}).flushMaxWrites).toBe(20_000);
    expect(readCounterConfig({ LIVECOUNT_FLUSH_MAX_WRITES: "100" }).flushMaxWrites).toBe(100);
    expect(() => readCounterConfig({ LIVECOUNT_FLUSH_MAX_WRITES: "99" })).toThrow(ConfigError);
    expect(() => readCounterConfig({ LIVECOUNT_FLUSH_MAX_WRITES: "many" })).toThrow(ConfigError);
  });

  test("counter - LIVECOUNT_AE_MERGES_IN_FLIGHT: 8 merges at once by default, 1 to 64", () => {
    expect(readCounterConfig({}).mergesInFlight).toBe(8);
    expect(readCounterConfig({ LIVECOUNT_AE_MERGES_IN_FLIGHT: "1" }).mergesInFlight).toBe(1);
    expect(readCounterConfig({ LIVECOUNT_AE_MERGES_IN_FLIGHT: "64" }).mergesInFlight).toBe(64);
    expect(() => readCounterConfig({ LIVECOUNT_AE_MERGES_IN_FLIGHT: "0" })).toThrow(ConfigError);
    expect(() => readCounterConfig({ LIVECOUNT_AE_MERGES_IN_FLIGHT: "65" })).toThrow(ConfigError);
  });

  test("counter - LIVECOUNT_MAX_COUNTERS_PER_PAGE: 256 counters by default, 1 to 2048", () => {
    expect(readCounterConfig({}).maxCountersPerPage).toBe(256);
    expect(readCounterConfig({ LIVECOUNT_MAX_COUNTERS_PER_PAGE: "1" }).maxCountersPerPage).toBe(1);
    expect(() => readCounterConfig({ LIVECOUNT_MAX_COUNTERS_PER_PAGE: "0" })).toThrow(ConfigError);
    expect(readCounterConfig({ LIVECOUNT_MAX_COUNTERS_PER_PAGE: "2048" }).maxCountersPerPage).toBe(2048);
    expect(() => readCounterConfig({ LIVECOUNT_MAX_COUNTERS_PER_PAGE: "2049" })).toThrow(
      "LIVECOUNT_MAX_COUNTERS_PER_PAGE must be <= 2048, got 2049",
    );
  });

  test("counter - LIVECOUNT_OPS_MAX_CONNECTIONS: 1024 connections to the ops port by default, 1 to 100000", () => {
    expect(readCounterConfig({}).opsMaxConnections).toBe(1024);
    expect(readCounterConfig({ LIVECOUNT_OPS_MAX_CONNECTIONS: "1" }).opsMaxConnections).toBe(1);
    expect(() => readCounterConfig({ LIVECOUNT_OPS_MAX_CONNECTIONS: "0" })).toThrow(ConfigError);
    expect(() => readCounterConfig({ LIVECOUNT_OPS_MAX_CONNECTIONS: "100001" })).toThrow(ConfigError);
  });
});
