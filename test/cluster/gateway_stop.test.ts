/**
 * A gateway stopped with SIGTERM while publisher requests wait for their owner, with real processes
 * (nats-server, redis-server, a counter node and a gateway from the built output). The owner is
 * frozen (SIGSTOP) so every request is certainly in progress when the signal comes: each one gets an
 * HTTP answer, none has its connection cut, and the changes answered 200 are the ones that count. A
 * request or an upgrade that comes meanwhile on a connection kept alive is answered 503.
 */
import { connect, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { expect, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { CLUSTER_PUBLISHER_KEY, type ClusterProcess } from "../support/cluster.js";
import { eventually } from "../support/eventually.js";
import { startCluster } from "../support/fault_scenes.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 60_000;
/** An owner request's timeout here: what a request in progress at the stop may still take. */
const REQUEST_TIMEOUT_MS = 1000;
const REQUESTS = 20;
const INCREMENTS_SENT = "livecount_gateway_increments_sent_total";

/** One like under `key`: its HTTP status, or "cut" when the connection failed without an answer. */
async function like(gateway: ClusterProcess, page: string, key: string): Promise<number | "cut"> {
  try {
    const res = await fetch(`${gateway.url}/v1/pages/${page}/counter`, {
      method: "PUT",
      headers: {
        authorization: `Bearer ${CLUSTER_PUBLISHER_KEY}`,
        "content-type": "application/json",
        "idempotency-key": key,
      },
      body: JSON.stringify({ action: "increment", counter: "likes" }),
    });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return "cut";
  }
}

/** A connection kept alive after one request, as a proxy's pool holds them. */
async function keptAlive(gateway: ClusterProcess): Promise<Socket> {
  const socket = connect(gateway.port, "127.0.0.1");
  socket.write("GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n");
  await new Promise((resolve) => socket.once("data", resolve));
  return socket;
}

/** Sends `request` on `socket` and resolves with everything the gateway answers before it closes. */
function answerOn(socket: Socket, request: string): Promise<string> {
  let text = "";
  socket.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")));
  socket.write(request);
  return new Promise((resolve) => socket.once("close", () => resolve(text)));
}

/**
 * Waits until the gateway has sent `n` increments to owners in all: the requests are in progress
 * when the signal comes, however long a loaded machine takes to deliver them (a request that came
 * after the signal would rightly be refused with 503).
 */
async function inProgress(gateway: ClusterProcess, n: number): Promise<void> {
  await eventually(async () => expect(await gateway.metric(INCREMENTS_SENT)).toBeGreaterThanOrEqual(n), {
    timeoutMs: 10_000,
  });
}

async function likes(gateway: ClusterProcess, page: string): Promise<number | undefined> {
  const res = await fetch(`${gateway.url}/v1/pages/${page}/counter`);
  return ((await res.json()) as { counters: Record<string, number> }).counters.likes;
}

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - gateway stop",
  () => {
    test(
      "cluster - SIGTERM answers every publisher request in progress: those whose owner comes back in time with 200, the rest with an error to retry; none is cut",
      async () => {
        const cluster = await startCluster({
          counters: 1,
          gateways: 1,
          env: { LIVECOUNT_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS) },
        });
        const [gateway] = cluster.gateways as [ClusterProcess];
        const [counter] = cluster.counters as [ClusterProcess];
        const page = "stopping-gateway";
        expect(await like(gateway, page, "warm")).toBe(200);

        // The owner comes back while the gateway drains: every request completes.
        counter.pause();
        const sent = Array.from({ length: REQUESTS }, (_, i) => like(gateway, page, `back-${i}`));
        await inProgress(gateway, 1 + REQUESTS);
        const stopped = gateway.terminate();
        await sleep(200);
        counter.resume();
        expect(await Promise.all(sent)).toEqual(Array(REQUESTS).fill(200));
        expect(await stopped).toEqual({ code: 0, signal: null });
        await gateway.start();
        expect(await likes(gateway, page)).toBe(1 + REQUESTS);

        // The owner stays frozen past the owner timeout: each request is answered with a retryable
        // error, and a retry with its key counts it once whatever the first try did.
        counter.pause();
        const stuck = Array.from({ length: REQUESTS }, (_, i) => like(gateway, page, `stuck-${i}`));
        const [forRequest, forUpgrade] = [await keptAlive(gateway), await keptAlive(gateway)];
        // (A new process: its count starts again at 0.)
        await inProgress(gateway, REQUESTS);
        const stoppedAgain = gateway.terminate();
        // While it drains: a new request, and an upgrade, on connections kept alive from before.
        await sleep(200);
        const refused = await answerOn(forRequest, "GET /readyz HTTP/1.1\r\nHost: gateway\r\n\r\n");
        expect(refused).toMatch(/^HTTP\/1\.1 503 [^]*retry-after: 1[^]*"code":"unavailable"/i);
        const upgrade = await answerOn(
          forUpgrade,
          "GET /ws HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        );
        expect(upgrade).toMatch(/^HTTP\/1\.1 503 [^]*retry-after: 1\r\n[^]*this gateway is stopping/i);
        const statuses = await Promise.all(stuck);
        expect(statuses.filter((s) => s === "cut")).toEqual([]);
        for (const status of statuses) expect([503, 504]).toContain(status);
        expect(await stoppedAgain).toEqual({ code: 0, signal: null });
        counter.resume();
        await gateway.start();
        for (let i = 0; i < REQUESTS; i++) expect(await like(gateway, page, `stuck-${i}`)).toBe(200);
        expect(await likes(gateway, page)).toBe(1 + 2 * REQUESTS);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
