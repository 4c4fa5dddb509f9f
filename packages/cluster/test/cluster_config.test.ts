import { ConfigError } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { HEARTBEATS_PER_LEASE, readClusterConfig } from "../src/cluster_config.js";

const ADMIN_KEY = "k".repeat(16);

describe("cluster - config", () => {
  test("cluster - an empty environment gives the documented defaults: one embedded DC", () => {
    const config = readClusterConfig({});
    expect(config).toEqual({
      dc: "dc1",
      nodeId: expect.stringMatching(/^n-[0-9a-f]{8}$/),
      natsUrl: undefined,
      redisUrl: undefined,
      redisCluster: undefined,
      redisWaitReplicas: 0,
      redisWaitTimeoutMs: 1000,
      partitions: 256,
      vnodes: 64,
      nodeLeaseMs: 6000,
      gatewayLeaseMs: 10000,
      graceMs: 3000,
      coalesceMs: 50,
      dcLeaseMs: 15000,
      dcHeartbeatMs: 250,
      antiEntropyMs: 10000,
      peerDcs: [],
      requestTimeoutMs: 3000,
      adminKey: undefined,
    });
    expect(HEARTBEATS_PER_LEASE).toBe(3);
  });

  test("cluster - a node without LIVECOUNT_NODE_ID gets a new random id every start", () => {
    expect(readClusterConfig({}).nodeId).not.toBe(readClusterConfig({}).nodeId);
  });

  test("cluster - every setting is read from its variable", () => {
    const config = readClusterConfig({
      LIVECOUNT_DC: "eu",
      LIVECOUNT_NODE_ID: "counter-1",
      LIVECOUNT_NATS_URL: "nats://a:4222,nats://b:4222",
      LIVECOUNT_REDIS_URL: "redis://r:6379",
      LIVECOUNT_REDIS_WAIT_REPLICAS: "2",
      LIVECOUNT_REDIS_WAIT_TIMEOUT_MS: "250",
      LIVECOUNT_PARTITIONS: "64",
      LIVECOUNT_VNODES: "16",
      LIVECOUNT_NODE_LEASE_MS: "2000",
      LIVECOUNT_GATEWAY_LEASE_MS: "4000",
      LIVECOUNT_GRACE_MS: "0",
      LIVECOUNT_COALESCE_MS: "10",
      LIVECOUNT_DC_LEASE_MS: "5000",
      LIVECOUNT_DC_HEARTBEAT_MS: "100",
      LIVECOUNT_ANTI_ENTROPY_MS: "2000",
      LIVECOUNT_PEER_DCS: "us, ap",
      LIVECOUNT_REQUEST_TIMEOUT_MS: "500",
      LIVECOUNT_ADMIN_KEY: ADMIN_KEY,
    });
    expect(config).toEqual({
      dc: "eu",
      nodeId: "counter-1",
      natsUrl: "nats://a:4222,nats://b:4222",
      redisUrl: "redis://r:6379",
      redisCluster: undefined,
      redisWaitReplicas: 2,
      redisWaitTimeoutMs: 250,
      partitions: 64,
      vnodes: 16,
      nodeLeaseMs: 2000,
      gatewayLeaseMs: 4000,
      graceMs: 0,
      coalesceMs: 10,
      dcLeaseMs: 5000,
      dcHeartbeatMs: 100,
      antiEntropyMs: 2000,
      peerDcs: ["us", "ap"],
      requestTimeoutMs: 500,
      adminKey: ADMIN_KEY,
    });
  });

  test("cluster - each numeric setting accepts its bounds and rejects one past them", () => {
    const bounds: Array<[string, number | undefined, number | undefined]> = [
      ["LIVECOUNT_PARTITIONS", 1, 65536],
      ["LIVECOUNT_REDIS_WAIT_TIMEOUT_MS", 1, 4000],
      ["LIVECOUNT_VNODES", 1, 1024],
      ["LIVECOUNT_NODE_LEASE_MS", 500, undefined],
      ["LIVECOUNT_GATEWAY_LEASE_MS", 500, undefined],
      ["LIVECOUNT_GRACE_MS", 0, 60000],
      ["LIVECOUNT_COALESCE_MS", 0, 1000],
      ["LIVECOUNT_DC_LEASE_MS", 1000, undefined],
      ["LIVECOUNT_DC_HEARTBEAT_MS", 50, 5000],
      ["LIVECOUNT_ANTI_ENTROPY_MS", 1000, undefined],
      ["LIVECOUNT_REQUEST_TIMEOUT_MS", 100, undefined],
    ];
    for (const [name, min, max] of bounds) {
      for (const ok of [min, max]) {
        if (ok !== undefined) expect(() => readClusterConfig({ [name]: String(ok) }), name).not.toThrow();
      }
      if (min !== undefined)
        expect(() => readClusterConfig({ [name]: String(min - 1) }), name).toThrow(
          `${name} must be >= ${min}`,
        );
      if (max !== undefined)
        expect(() => readClusterConfig({ [name]: String(max + 1) }), name).toThrow(
          `${name} must be <= ${max}`,
        );
    }
  });

  test("cluster - a Redis Cluster is given by its seed nodes, instead of one Redis, and WAIT needs a Redis", () => {
    const config = readClusterConfig({
      LIVECOUNT_REDIS_CLUSTER: "10.0.0.1:7000, redis-1.redis:7001,[::1]:7002,redis://u:p@r2:7003",
      LIVECOUNT_REDIS_WAIT_REPLICAS: "1",
    });
    expect(config.redisCluster).toEqual([
      "10.0.0.1:7000",
      "redis-1.redis:7001",
      "[::1]:7002",
      "redis://u:p@r2:7003",
    ]);
    expect(config.redisUrl).toBeUndefined();
    expect(config.redisWaitReplicas).toBe(1);
    expect(() =>
      readClusterConfig({ LIVECOUNT_REDIS_URL: "redis://r:6379", LIVECOUNT_REDIS_CLUSTER: "r:7000" }),
    ).toThrow("set LIVECOUNT_REDIS_URL (one Redis) or LIVECOUNT_REDIS_CLUSTER (a Redis Cluster), not both");
    for (const bad of ["r", "r:", "r:70000", "r:0", "r:70000000", "r:7000/0", "r 1:7000"]) {
      expect(() => readClusterConfig({ LIVECOUNT_REDIS_CLUSTER: bad }), bad).toThrow(ConfigError);
    }
    expect(() => readClusterConfig({ LIVECOUNT_REDIS_WAIT_REPLICAS: "1" })).toThrow(
      "LIVECOUNT_REDIS_WAIT_REPLICAS needs LIVECOUNT_REDIS_URL or LIVECOUNT_REDIS_CLUSTER",
    );
    const redis = { LIVECOUNT_REDIS_URL: "redis://r:6379" };
    expect(readClusterConfig({ ...redis, LIVECOUNT_REDIS_WAIT_REPLICAS: "16" }).redisWaitReplicas).toBe(16);
    expect(() => readClusterConfig({ ...redis, LIVECOUNT_REDIS_WAIT_REPLICAS: "17" })).toThrow(
      "LIVECOUNT_REDIS_WAIT_REPLICAS must be <= 16",
    );
    expect(() => readClusterConfig({ ...redis, LIVECOUNT_REDIS_WAIT_REPLICAS: "-1" })).toThrow(ConfigError);
  });

  test("cluster - ids that become subject tokens must be tokens", () => {
    expect(() => readClusterConfig({ LIVECOUNT_DC: "eu.west" })).toThrow(ConfigError);
    expect(() => readClusterConfig({ LIVECOUNT_NODE_ID: "node 1" })).toThrow(ConfigError);
    expect(() => readClusterConfig({ LIVECOUNT_PEER_DCS: "us,eu.west" })).toThrow(
      'LIVECOUNT_PEER_DCS: "eu.west" is not a data center id',
    );
    expect(() => readClusterConfig({ LIVECOUNT_PEER_DCS: `us,${"x".repeat(65)}` })).toThrow(ConfigError);
    expect(readClusterConfig({ LIVECOUNT_PEER_DCS: `${"x".repeat(64)}` }).peerDcs).toEqual(["x".repeat(64)]);
    // A list shared by every DC names each one too: its own name is left out.
    expect(readClusterConfig({ LIVECOUNT_DC: "eu", LIVECOUNT_PEER_DCS: "us,eu,ap" }).peerDcs).toEqual([
      "us",
      "ap",
    ]);
  });

  test("cluster - the admin key is 16..256 printable ASCII characters", () => {
    expect(readClusterConfig({ LIVECOUNT_ADMIN_KEY: "k".repeat(256) }).adminKey).toBe("k".repeat(256));
    expect(readClusterConfig({ LIVECOUNT_ADMIN_KEY: "!~".repeat(8) }).adminKey).toBe("!~".repeat(8));
    for (const bad of ["k".repeat(15), "k".repeat(257), `${"k".repeat(16)} k`, `${"k".repeat(16)}\u00e9`]) {
      expect(() => readClusterConfig({ LIVECOUNT_ADMIN_KEY: bad })).toThrow(
        "LIVECOUNT_ADMIN_KEY must be 16..256 printable ASCII characters",
      );
    }
  });
});
