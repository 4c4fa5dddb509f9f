/**
 * A gateway forwards the presence of one partition to its owner one request at a time: what queued
 * while a request was out goes in the next, and a resync (a new owner, a restarted one) carries
 * everything the gateway holds in the partition. A hot page on one gateway makes those requests as
 * large as its audience, and NATS takes at most `max_payload` in one message (1 MiB by default:
 * about 8,000 viewers of 128-character ids, 29,000 of the widget's). Here `max_payload` is 64 KiB,
 * so a few hundred such viewers pass it.
 */
import { expect, onTestFinished, test } from "vitest";
import { TestCluster } from "../support/cluster.js";
import { describeWithServers } from "../support/servers.js";
import { TestClient } from "../support/ws_client.js";

const TEST_TIMEOUT_MS = 120_000;
const MAX_PAYLOAD = 64 * 1024;
/** Viewers of one page on one gateway: at 131 bytes an id on the bus, 79 KB of ids. */
const VIEWERS = 600;
const PAGE = "hot";

/** The i-th viewer's id: 128 characters, the longest an id may be. */
const viewerOf = (i: number): string => `viewer-${String(i).padStart(121, "0")}`;

describeWithServers("cluster - a partition crowded past what one bus message holds", () => {
  test(
    "its presence reaches the owner in several requests, after a burst of joins and after the owner restarts",
    async () => {
      const cluster = await TestCluster.forTest({
        counters: 1,
        gateways: 1,
        natsConfig: `max_payload: ${MAX_PAYLOAD}`,
        env: { LIVECOUNT_MAX_CONNECTIONS_PER_IP: String(VIEWERS + 10) },
      });
      const [gateway] = cluster.gateways;
      const [node] = cluster.counters;
      const watcher = await TestClient.connect(gateway!.wsUrl);
      const sockets: TestClient[] = [];
      onTestFinished(async () => {
        await Promise.all([watcher, ...sockets].map((c) => c.terminate()));
      });
      watcher.watch(PAGE);
      for (let i = 0; i < VIEWERS; i++) sockets.push(await TestClient.connect(gateway!.wsUrl));

      // Every join in one burst: the gateway's next request to the owner carries all of them.
      sockets.forEach((s, i) => s.join(PAGE, viewerOf(i)));
      await expect
        .poll(() => watcher.lastCount(PAGE)?.viewers, { timeout: 30_000, interval: 200 })
        .toBe(VIEWERS);

      // A new owner learns everything the gateway holds in the partition from it.
      await node!.kill();
      await node!.start();
      await cluster.waitBalanced();
      const resynced = await TestClient.connect(gateway!.wsUrl);
      sockets.push(resynced);
      resynced.watch(PAGE);
      await expect
        .poll(() => resynced.lastCount(PAGE)?.viewers, { timeout: 60_000, interval: 200 })
        .toBe(VIEWERS);
      await expect.poll(() => watcher.lastCount(PAGE)?.viewers, { timeout: 20_000 }).toBe(VIEWERS);
    },
    TEST_TIMEOUT_MS,
  );
});
