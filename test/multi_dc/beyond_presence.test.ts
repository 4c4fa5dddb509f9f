/**
 * Attention and connections across two data centers of real processes (test/support/multi_dc.ts):
 * each DC counts its own sockets, both show the sum over live DCs, a DC cut off drops out after its
 * lease like its viewers, and comes back after the heal.
 */
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { CONVERGE_MS } from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { startDataCenters, type TestDc } from "../support/multi_dc.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";
import { TestClient } from "../support/ws_client.js";

const TEST_TIMEOUT_MS = 90_000;

interface Presence {
  readonly viewers: number;
  readonly active: number;
  readonly connections: number;
}

async function presenceOver(dc: TestDc, page: string): Promise<Presence> {
  const res = await fetch(`${dc.gateways[0]!.url}/v1/pages/${encodeURIComponent(page)}/counter`);
  expect(res.status).toBe(200);
  const { viewers, active, connections } = (await res.json()) as Presence;
  return { viewers, active, connections };
}

/** Both the DC's HTTP read and its watcher's latest count frame show `want`. */
async function expectShown(dc: TestDc, watcher: TestClient, page: string, want: Presence): Promise<void> {
  await eventually(
    async () => {
      expect(await presenceOver(dc, page)).toEqual(want);
      expect(watcher.lastCount(page)).toMatchObject(want);
    },
    { timeoutMs: CONVERGE_MS, message: `${dc.name} shows ${JSON.stringify(want)}` },
  );
}

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "multi-dc - beyond presence",
  () => {
    test(
      "multi-dc - active viewers and connections are summed over live DCs, drop out with a cut-off DC and come back after the heal",
      async () => {
        const multi = await startDataCenters({ counters: 1 });
        const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
        const clients: TestClient[] = [];
        onTestFinished(async () => {
          await Promise.all(clients.map((c) => c.terminate()));
        });
        const connect = async (dc: TestDc): Promise<TestClient> => {
          const client = await TestClient.connect(dc.gateways[0]!.wsUrl);
          clients.push(client);
          return client;
        };
        const page = "attention-two-dcs";
        const [watch1, watch2] = await Promise.all([connect(dc1), connect(dc2)]);
        watch1.watch(page);
        watch2.watch(page);

        // dc1: alice on a visible and a hidden tab, bob visible. dc2: carol on a hidden tab.
        const [aliceFront, aliceBack, bob, carol] = await Promise.all([
          connect(dc1),
          connect(dc1),
          connect(dc1),
          connect(dc2),
        ]);
        aliceFront.send({ type: "join", page, viewer: "alice", active: true });
        aliceBack.send({ type: "join", page, viewer: "alice", active: false });
        bob.send({ type: "join", page, viewer: "bob" });
        carol.send({ type: "join", page, viewer: "carol", active: false });
        const both = { viewers: 3, active: 2, connections: 4 };
        await expectShown(dc1, watch1, page, both);
        await expectShown(dc2, watch2, page, both);

        // Carol looks at the page: everyone is looking.
        carol.send({ type: "active", page, active: true });
        await expectShown(dc1, watch1, page, { viewers: 3, active: 3, connections: 4 });
        await expectShown(dc2, watch2, page, { viewers: 3, active: 3, connections: 4 });
        // Alice and bob look away: only carol is looking, in dc2.
        aliceFront.send({ type: "active", page, active: false });
        bob.send({ type: "active", page, active: false });
        await expectShown(dc1, watch1, page, { viewers: 3, active: 1, connections: 4 });
        await expectShown(dc2, watch2, page, { viewers: 3, active: 1, connections: 4 });

        // Cut off, each DC shows its own presence once the other's lease is over.
        multi.cut();
        await expectShown(dc1, watch1, page, { viewers: 2, active: 0, connections: 3 });
        await expectShown(dc2, watch2, page, { viewers: 1, active: 1, connections: 1 });
        // Meanwhile alice closes her hidden tab in dc1.
        await aliceBack.close();
        await expectShown(dc1, watch1, page, { viewers: 2, active: 0, connections: 2 });

        multi.heal();
        await multi.waitLinked();
        const healed = { viewers: 3, active: 1, connections: 3 };
        await expectShown(dc1, watch1, page, healed);
        await expectShown(dc2, watch2, page, healed);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
