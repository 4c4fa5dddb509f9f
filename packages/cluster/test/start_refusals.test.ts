/**
 * What a starting process must not wait for, against real servers that require credentials: a
 * Redis or NATS that refuses them fails the start at once, naming why (WRONGPASS, NOAUTH, an
 * authorization violation), while a server that is down is a failure worth waiting for.
 */
import { BusConnectError } from "@livecount/bus";
import { silentLogger } from "@livecount/runtime";
import { RedisStore, StoreConnectError } from "@livecount/store";
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, test } from "vitest";
import { NatsServer } from "../../../test/support/nats_server.js";
import { freePort } from "../../../test/support/ports.js";
import { RedisServer } from "../../../test/support/redis_server.js";
import { describeWithServers } from "../../../test/support/servers.js";
import { connectBus, openStore } from "../src/adapters.js";
import { readClusterConfig } from "../src/cluster_config.js";

const PASSWORD = "right-password-0001";

describeWithServers("cluster - a start refused by its servers", () => {
  let redis: RedisServer;
  let nats: NatsServer;

  beforeAll(async () => {
    // Started open (its helper's readiness check has no password), then closed to anyone without one.
    redis = await RedisServer.start();
    const admin = new Redis(redis.url);
    await admin.config("SET", "requirepass", PASSWORD);
    admin.disconnect();
    nats = await NatsServer.start({ config: `authorization { user: lc, password: "${PASSWORD}" }` });
  });

  afterAll(async () => {
    await redis?.stop();
    await nats?.stop();
  });

  const redisUrl = (password: string): string =>
    redis.url.replace("redis://", password === "" ? "redis://" : `redis://:${password}@`);
  const natsUrl = (password: string): string => nats.url.replace("nats://", `nats://lc:${password}@`);

  test("cluster - Redis refusing the password, or asking for one, fails the start at once and says why", async () => {
    for (const [password, why] of [
      ["wrong-password", /^WRONGPASS/],
      ["", /^NOAUTH/],
    ] as const) {
      const config = readClusterConfig({ LIVECOUNT_REDIS_URL: redisUrl(password) });
      const err = await openStore(config, silentLogger).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreConnectError);
      expect((err as StoreConnectError).permanent).toBe(true);
      expect(((err as Error).cause as Error).message).toMatch(why);
    }
    const store = await openStore(
      readClusterConfig({ LIVECOUNT_REDIS_URL: redisUrl(PASSWORD) }),
      silentLogger,
    );
    await store.close();
  });

  test("cluster - NATS refusing the credentials fails the start at once", async () => {
    const config = readClusterConfig({ LIVECOUNT_NATS_URL: natsUrl("wrong-password") });
    const err = await connectBus(config, silentLogger).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusConnectError);
    expect((err as BusConnectError).permanent).toBe(true);
    expect((err as Error).message).not.toContain("wrong-password");
    const bus = await connectBus(readClusterConfig({ LIVECOUNT_NATS_URL: natsUrl(PASSWORD) }), silentLogger);
    await bus.close();
  });

  test("cluster - a Redis that is not up is a failure worth waiting for", async () => {
    const err = await RedisStore.connect({ url: `redis://127.0.0.1:${await freePort()}` }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreConnectError);
    expect((err as StoreConnectError).permanent).toBe(false);
    expect(((err as Error).cause as Error).message).toMatch(/ECONNREFUSED/);
  });
});
