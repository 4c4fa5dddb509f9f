/**
 * Processes whose wall clocks disagree, with real processes under libfaketime (LD_PRELOAD): only the
 * wall clock is moved (FAKETIME_DONT_FAKE_MONOTONIC), as a host off NTP or stepped at boot would be.
 * Partition leases run on Redis's clock, so a counter node minutes ahead takes no live lease from
 * its peer and its own run out on time after a crash; owners order a gateway's incarnations by when
 * they heard them, so one restarted with its clock behind is still the later one.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { readCounter } from "../support/counter_reads.js";
import { ClusterProcess, TIMINGS } from "../support/cluster.js";
import { startCluster } from "../support/fault_scenes.js";
import { eventually, sleep } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";
import { TestClient } from "../support/ws_client.js";

const LIBFAKETIME = ["x86_64-linux-gnu", "aarch64-linux-gnu"]
  .map((arch) => `/usr/lib/${arch}/faketime/libfaketime.so.1`)
  .find((path) => existsSync(path));
const TEST_TIMEOUT_MS = 60_000;
const PAGES = Array.from({ length: 20 }, (_, i) => `skew-${i}`);

/** The same process (node id, port, environment) with its wall clock moved by `offset` ("+300s"). */
function skewed(p: ClusterProcess, offset: string, logDir: string): ClusterProcess {
  const env = { ...p.env, LD_PRELOAD: LIBFAKETIME!, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: "1" };
  return new ClusterProcess(p.kind, p.nodeId, p.port, env, join(logDir, `${p.nodeId}-skewed.log`));
}

describeWithBinary(
  natsServerAvailable() && redisServerAvailable() && LIBFAKETIME !== undefined,
  "nats-server, redis-server and libfaketime (Debian: faketime) are required",
  "cluster - clocks that disagree",
  () => {
    test(
      "cluster - a counter node 5 minutes ahead takes no live lease, and its own run out on time when it dies; a gateway restarted 30 s behind supersedes its dead incarnation at once",
      async () => {
        const cluster = await startCluster({ counters: 2, gateways: 1 });
        const [first, second] = cluster.counters as [ClusterProcess, ClusterProcess];
        const [gateway] = cluster.gateways as [ClusterProcess];
        const ahead = skewed(second, "+300s", cluster.logDir);
        const behind = skewed(gateway, "-30s", cluster.logDir);
        const clients: TestClient[] = [];
        // The cluster prints its own logs (startCluster); the skewed processes are not among them.
        onTestFinished(async ({ task }) => {
          if (task.result?.state === "fail")
            console.error(`\n----- the skewed processes -----\n${ahead.logTail()}\n${behind.logTail()}`);
          await Promise.all(clients.map((c) => c.terminate()));
          await Promise.all([ahead.kill(), behind.kill()]);
        });

        // The second counter node restarted 5 minutes ahead: it takes its share over as a restart
        // does, and nothing of the first one's.
        await second.terminate();
        await ahead.start();
        await eventually(async () => {
          const owned = await Promise.all(
            [first, ahead].map((c) => c.metric("livecount_counter_partitions_owned")),
          );
          expect(owned[0]! + owned[1]!).toBe(TIMINGS.partitions);
          expect(owned[1]).toBeGreaterThan(0);
        });
        expect(first.log()).not.toContain("partition lease lost");

        // Killed, its leases run out after a partition lease for the first one too, not 5 minutes on.
        await ahead.kill();
        const killedAt = Date.now();
        await eventually(
          async () => {
            for (const page of PAGES) await readCounter(gateway, page);
          },
          { timeoutMs: 20_000, intervalMs: 100 },
        );
        const backMs = Date.now() - killedAt;
        console.log(`cluster clock skew: every page readable ${backMs} ms after the kill`);
        expect(backMs).toBeLessThan(3 * TIMINGS.partitionLeaseMs);

        // Three viewers of a page, their gateway killed and restarted 30 s behind: the viewers who
        // reconnect replace the dead incarnation's within its grace, not its lease.
        const joinThree = async (): Promise<void> => {
          for (let i = 0; i < 3; i++) {
            const client = await TestClient.connect(gateway.wsUrl);
            clients.push(client);
            client.join("skew-gateway");
          }
        };
        await joinThree();
        await eventually(async () => expect((await readCounter(gateway, "skew-gateway")).viewers).toBe(3));
        await gateway.kill();
        await behind.start();
        await joinThree();
        const seen: number[] = [];
        const since = Date.now();
        while (Date.now() - since < TIMINGS.gatewayLeaseMs) {
          seen.push((await readCounter(behind, "skew-gateway")).viewers);
          await sleep(50);
        }
        // The dead incarnation's viewers linger for the grace window (300 ms) at most.
        const doubled = seen.filter((v) => v > 3).length * 50;
        expect(doubled).toBeLessThan(TIMINGS.gatewayLeaseMs / 2);
        expect(seen.at(-1)).toBe(3);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
