/**
 * Occupancy webhooks end to end: real WebSocket clients on the embedded default (a uWS gateway and
 * a counter node in one process), a real HTTP receiver (node:http) checking signatures.
 */
import { ConfigError } from "@livecount/runtime";
import { startStandalone } from "@livecount/standalone";
import { afterEach, describe, expect, test } from "vitest";
import { eventually } from "../support/eventually.js";
import { OpenApiDoc } from "../support/openapi.js";
import { TEST_ENV, TestPlatform } from "../support/platform.js";
import { WebhookReceiver, validSignature, type HookBody } from "../support/webhook_receiver.js";
import type { TestClient } from "../support/ws_client.js";

const SECRET = "test-webhook-secret-0123456789abcdef";

/** A value of the platform's Prometheus text, 0 when the series is absent. */
function metric(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

/** What a receiver reconstructs of a page: the events, in order, with their viewers. */
function story(bodies: readonly HookBody[]): string[] {
  return bodies.map((b) =>
    b.type === "page.threshold" ? `${b.direction} ${b.threshold} @${b.viewers}` : `${b.type} @${b.viewers}`,
  );
}

describe("webhooks - occupancy events from the embedded default", () => {
  let platform: TestPlatform | undefined;
  let receiver: WebhookReceiver | undefined;
  afterEach(async () => {
    await platform?.close();
    await receiver?.stop();
    platform = receiver = undefined;
  });

  async function start(env: Record<string, string> = {}): Promise<{ p: TestPlatform; r: WebhookReceiver }> {
    const r = (receiver = await WebhookReceiver.start());
    const p = (platform = await TestPlatform.start({
      LIVECOUNT_WEBHOOK_URL: r.url,
      LIVECOUNT_WEBHOOK_SECRET: SECRET,
      LIVECOUNT_WEBHOOK_RETRY_MS: "50",
      LIVECOUNT_WEBHOOK_RETRY_MAX_MS: "200",
      // A third of it is the settle window deliveries wait for after the node starts.
      LIVECOUNT_GATEWAY_LEASE_MS: "1500",
      ...env,
    }));
    return { p, r };
  }

  /** Waits until no event waits for delivery: every event made so far has been answered. */
  async function drained(p: TestPlatform): Promise<void> {
    await eventually(async () => {
      const queued = metric(await p.metricsText(), "livecount_counter_webhook_queued");
      if (queued !== 0) throw new Error(`${queued} events queued`);
    });
  }

  test("webhooks - a join sends one signed page.occupied, a reload within the grace nothing, the departure one page.vacated after the grace", async () => {
    // Long enough for a reload on a loaded host (at nice 19 beside the timed clusters, a close and a
    // new socket's join took over a second): a reload past its grace is a real departure.
    const GRACE_MS = 4_000;
    const { p, r } = await start({ LIVECOUNT_GRACE_MS: String(GRACE_MS) });
    const first = await p.connect();
    first.join("article-1", "reader-1");
    const [occupied] = await r.waitForDelivered("article-1", 1);
    const request = r.requests("article-1")[0]!;
    expect(validSignature(request.raw, request.headers["x-livecount-signature"], SECRET)).toBe(true);
    expect(validSignature(request.raw, request.headers["x-livecount-signature"], `${SECRET}x`)).toBe(false);
    expect(request.headers["content-type"]).toBe("application/json");
    expect(Object.keys(occupied!)).toEqual(["id", "type", "page", "viewers", "dc", "ts"]);
    // The body and signature are what docs/openapi.json documents (webhooks.occupancy).
    const doc = new OpenApiDoc();
    expect(doc.violations({ $ref: "#/components/schemas/WebhookEvent" }, occupied)).toEqual([]);
    expect(request.headers["x-livecount-signature"]).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(occupied).toMatchObject({ type: "page.occupied", page: "article-1", viewers: 1, dc: "dc1" });
    expect(occupied!.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(Math.abs(occupied!.ts - Date.now())).toBeLessThan(10_000);

    // A reload: the socket closes and the same viewer comes back on a new one within the grace.
    first.ws.close();
    await first.closed;
    const second = await p.connect();
    second.join("article-1", "reader-1");
    await second.waitForViewers("article-1", 1);
    // A page left after the reload is vacated once its grace ends, so the reload's grace is over
    // by then too; once nothing waits for delivery, every event the reload made has arrived.
    const marker = await p.connect();
    marker.join("marker", "reader-2");
    await r.waitForDelivered("marker", 1);
    marker.leave("marker");
    await r.waitForDelivered("marker", 2);
    await drained(p);
    expect(story(r.delivered("article-1"))).toEqual(["page.occupied @1"]);

    const leftAt = Date.now();
    second.leave("article-1");
    const [, vacated] = await r.waitForDelivered("article-1", 2);
    expect(vacated).toMatchObject({ type: "page.vacated", page: "article-1", viewers: 0, dc: "dc1" });
    expect(vacated!.ts - leftAt).toBeGreaterThanOrEqual(GRACE_MS);
    expect(vacated!.id).not.toBe(occupied!.id);
    await drained(p);
    expect(r.requests("article-1")).toHaveLength(2);
  });

  test("webhooks - a receiver answering 500 then 200 gets the same event again, and the page's next event only after it", async () => {
    const { p, r } = await start();
    r.hold();
    r.answerNext(500);
    const client = await p.connect();
    client.join("retried", "reader-1");
    await eventually(() => expect(r.requests("retried")).toHaveLength(1));
    client.leave("retried");
    // The departure's event exists (the grace is over) while the first one still waits for its answer.
    await eventually(async () => {
      expect(
        metric(await p.metricsText(), `livecount_counter_webhook_events_total{type="page.vacated"}`),
      ).toBe(1);
    });
    r.release();
    await r.waitForDelivered("retried", 2);
    await drained(p);
    const requests = r.requests("retried");
    expect(requests.map((q) => [q.body.type, q.status])).toEqual([
      ["page.occupied", 500],
      ["page.occupied", 200],
      ["page.vacated", 200],
    ]);
    expect(requests[1]!.raw).toBe(requests[0]!.raw);
    expect(requests[2]!.body.id).not.toBe(requests[0]!.body.id);
    for (const q of requests)
      expect(validSignature(q.raw, q.headers["x-livecount-signature"], SECRET)).toBe(true);
    const text = await p.metricsText();
    expect(metric(text, `livecount_counter_webhook_failures_total{reason="status"}`)).toBe(1);
    expect(metric(text, "livecount_counter_webhook_retries_total")).toBe(1);
  });

  test("webhooks - thresholds are crossed up as viewers arrive and down below their hysteresis band as they leave", async () => {
    // 2 has a band of 1 (down below 1: at 0); 4 has a band of 1 (down below 3).
    const { p, r } = await start({
      LIVECOUNT_WEBHOOK_THRESHOLDS: "2,4",
      LIVECOUNT_WEBHOOK_HYSTERESIS_PCT: "25",
    });
    const watcher = await p.watcher("hot");
    const viewers = [];
    for (let i = 1; i <= 4; i++) {
      const client = await p.connect();
      client.join("hot", `reader-${i}`);
      await watcher.waitForViewers("hot", i);
      viewers.push(client);
    }
    for (let i = 3; i >= 0; i--) {
      viewers.pop()!.leave("hot");
      await watcher.waitForViewers("hot", i);
    }
    await r.waitForDelivered("hot", 6);
    await drained(p);
    expect(story(r.delivered("hot"))).toEqual([
      "page.occupied @1",
      "up 2 @2",
      "up 4 @4",
      "down 4 @2",
      "down 2 @0",
      "page.vacated @0",
    ]);
    const bodies = r.delivered("hot");
    expect(bodies[1]).toMatchObject({ type: "page.threshold", threshold: 2, direction: "up" });
    expect(Object.keys(bodies[1]!)).toEqual([
      "id",
      "type",
      "page",
      "viewers",
      "threshold",
      "direction",
      "dc",
      "ts",
    ]);
  });

  test("webhooks - a receiver that is down for a while gets every event in order when it comes back", async () => {
    const { p, r } = await start();
    await r.stop();
    const pages = ["down-1", "down-2"];
    const clients: TestClient[] = [];
    for (const page of pages) {
      const client = await p.connect();
      client.join(page, "reader-1");
      await client.waitForViewers(page, 1);
      clients.push(client);
    }
    pages.forEach((page, i) => clients[i]!.leave(page));
    // Four events made, each tried and retried against a closed port.
    await eventually(async () => {
      const text = await p.metricsText();
      expect(metric(text, `livecount_counter_webhook_events_total{type="page.vacated"}`)).toBe(2);
      expect(
        metric(text, `livecount_counter_webhook_failures_total{reason="network"}`),
      ).toBeGreaterThanOrEqual(6);
    });
    expect(r.received).toHaveLength(0);
    await r.restart();
    for (const page of pages) {
      await r.waitForDelivered(page, 2);
      expect(story(r.delivered(page))).toEqual(["page.occupied @1", "page.vacated @0"]);
    }
    await drained(p);
    expect(r.received).toHaveLength(4);
    expect(
      metric(await p.metricsText(), `livecount_counter_webhook_deliveries_total{result="delivered"}`),
    ).toBe(4);
  });

  test("webhooks - the queue holds events up to its cap; one more drops the oldest not being sent", async () => {
    const { p, r } = await start({ LIVECOUNT_WEBHOOK_MAX_QUEUED: "3", LIVECOUNT_WEBHOOK_CONCURRENCY: "1" });
    r.hold();
    const client = await p.connect();
    const occupy = async (page: string, events: number) => {
      client.join(page, "reader-1");
      await eventually(async () => {
        expect(
          metric(await p.metricsText(), `livecount_counter_webhook_events_total{type="page.occupied"}`),
        ).toBe(events);
      });
    };
    await occupy("queued-1", 1);
    await eventually(() => expect(r.requests("queued-1")).toHaveLength(1));
    await occupy("queued-2", 2);
    await occupy("queued-3", 3);
    let text = await p.metricsText();
    expect(metric(text, "livecount_counter_webhook_queued")).toBe(3);
    expect(metric(text, `livecount_counter_webhook_dropped_total{reason="queue_full"}`)).toBe(0);
    await occupy("queued-4", 4);
    text = await p.metricsText();
    expect(metric(text, "livecount_counter_webhook_queued")).toBe(3);
    expect(metric(text, `livecount_counter_webhook_dropped_total{reason="queue_full"}`)).toBe(1);
    r.release();
    await drained(p);
    expect(r.delivered().map((b) => b.page)).toEqual(["queued-1", "queued-3", "queued-4"]);
    expect(r.maxOpen).toBe(1);
  });

  test("webhooks - the embedded default refuses to start with a webhook URL and no secret", async () => {
    await expect(
      startStandalone({ env: { ...TEST_ENV, LIVECOUNT_WEBHOOK_URL: "http://127.0.0.1:9/hooks" } }),
    ).rejects.toBeInstanceOf(ConfigError);
  });
});
