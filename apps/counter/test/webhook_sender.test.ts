import { createHmac } from "node:crypto";
import { silentLogger } from "@livecount/runtime";
import { Registry } from "prom-client";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import type { WebhookConfig } from "../src/webhook_config.js";
import type { OccupancyEvent, WebhookBody } from "../src/webhook_event.js";
import { WebhookMetrics } from "../src/webhook_metrics.js";
import { WebhookSender } from "../src/webhook_sender.js";

const SECRET = "s".repeat(32);
const RECEIVER = "http://receiver.test/hooks";
const CONFIG: WebhookConfig = {
  url: RECEIVER,
  secret: SECRET,
  thresholds: [],
  hysteresisPct: 10,
  timeoutMs: 5_000,
  maxAgeMs: 60_000,
  maxQueued: 100,
  concurrency: 8,
  retryMs: 1_000,
  retryMaxMs: 4_000,
};

/** One request the sender made; the test answers it, fails it, or lets it hang. */
interface Call {
  readonly body: WebhookBody;
  readonly raw: string;
  readonly headers: Record<string, string>;
  readonly signal: AbortSignal;
  respond(status: number): void;
  fail(err: Error): void;
}

/** A sender on a manual clock whose fetch records each request and waits for the test to settle it. */
function setUp(config: Partial<WebhookConfig> = {}, random: () => number = () => 0.5) {
  const clock = new ManualClock();
  const registry = new Registry();
  const calls: Call[] = [];
  const open: Call[] = [];
  const metrics = new WebhookMetrics(registry, { queued: () => sender.queued });
  const sender: WebhookSender = new WebhookSender({
    config: { ...CONFIG, ...config },
    dc: "eu",
    clock,
    logger: silentLogger,
    metrics,
    random,
    fetch: (url, init) =>
      new Promise<Response>((resolve, reject) => {
        expect(url).toBe(RECEIVER);
        const raw = init.body as string;
        const settled = () => {
          const index = open.indexOf(call);
          if (index >= 0) open.splice(index, 1);
        };
        const call: Call = {
          body: JSON.parse(raw) as WebhookBody,
          raw,
          headers: init.headers as Record<string, string>,
          signal: init.signal!,
          respond: (status) => {
            settled();
            resolve(new Response(null, { status }));
          },
          fail: (err) => {
            settled();
            reject(err);
          },
        };
        init.signal!.addEventListener("abort", () => call.fail(new DOMException("aborted", "AbortError")));
        calls.push(call);
        open.push(call);
      }),
  });
  let ts = 0;
  const event = (
    page: string,
    type: OccupancyEvent["type"] = "page.occupied",
    partition = 0,
  ): OccupancyEvent =>
    type === "page.threshold"
      ? { type, threshold: 100, direction: "up", page, partition, viewers: 100, ts: ++ts }
      : { type, page, partition, viewers: type === "page.occupied" ? 1 : 0, ts: ++ts };
  /** Answers every open request of `page` (all pages: undefined) with `status`, in order. */
  const answer = async (status: number, page?: string) => {
    for (const call of [...open]) if (page === undefined || call.body.page === page) call.respond(status);
    await clock.advance(0);
  };
  const value = async (name: string, labels: Record<string, string> = {}) => {
    const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name)!;
    const match = metric.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
    return match?.value ?? 0;
  };
  return { clock, sender, calls, open, event, answer, value };
}

describe("counter - webhook sender", () => {
  test("counter - an event is POSTed as JSON with a signature of the raw body by the secret", async () => {
    const { clock, sender, calls, event, answer, value } = setUp();
    sender.send(event("article-1"));
    sender.send(event("article-2", "page.threshold"));
    await clock.advance(0);
    expect(calls).toHaveLength(2);
    const [first, second] = calls as [Call, Call];
    expect(first.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      type: "page.occupied",
      page: "article-1",
      viewers: 1,
      dc: "eu",
      ts: 1,
    });
    expect(Object.keys(first.body)).toEqual(["id", "type", "page", "viewers", "dc", "ts"]);
    expect(second.body).toMatchObject({
      type: "page.threshold",
      threshold: 100,
      direction: "up",
      viewers: 100,
    });
    expect(second.body.id).not.toBe(first.body.id);
    for (const call of calls) {
      expect(call.headers["content-type"]).toBe("application/json");
      const hmac = createHmac("sha256", SECRET).update(call.raw).digest("hex");
      expect(call.headers["x-livecount-signature"]).toBe(`sha256=${hmac}`);
    }
    await answer(204);
    expect(sender.queued).toBe(0);
    expect(await value("livecount_counter_webhook_deliveries_total", { result: "delivered" })).toBe(2);
    expect(await value("livecount_counter_webhook_events_total", { type: "page.occupied" })).toBe(1);
  });

  test("counter - a non-2xx answer, a network error and a timeout are retried with the same body after a full-jitter backoff that doubles up to its cap", async () => {
    // The jitter draws its largest value: each wait is the whole (capped) doubling window, less 1 ms.
    const { clock, sender, calls, open, event, answer, value } = setUp(
      { retryMaxMs: 3_000 },
      () => 0.9999999,
    );
    sender.send(event("article-1"));
    await clock.advance(0);
    await answer(500);
    await clock.advance(998);
    expect(calls).toHaveLength(1);
    await clock.advance(1);
    expect(calls).toHaveLength(2);
    open[0]!.fail(new TypeError("fetch failed"));
    await clock.advance(1_998);
    expect(calls).toHaveLength(2);
    await clock.advance(1);
    expect(calls).toHaveLength(3);
    // Nobody answers: the attempt is abandoned at the timeout.
    await clock.advance(CONFIG.timeoutMs - 1);
    expect(open).toHaveLength(1);
    await clock.advance(1);
    expect(open).toHaveLength(0);
    // The third retry's window would be 4 s: the cap (3 s) holds it.
    await clock.advance(2_998);
    expect(calls).toHaveLength(3);
    await clock.advance(1);
    expect(calls).toHaveLength(4);
    await answer(200);
    expect(new Set(calls.map((c) => c.raw)).size).toBe(1);
    expect(await value("livecount_counter_webhook_failures_total", { reason: "status" })).toBe(1);
    expect(await value("livecount_counter_webhook_failures_total", { reason: "network" })).toBe(1);
    expect(await value("livecount_counter_webhook_failures_total", { reason: "timeout" })).toBe(1);
    expect(await value("livecount_counter_webhook_retries_total")).toBe(3);
    expect(await value("livecount_counter_webhook_deliveries_total", { result: "delivered" })).toBe(1);
  });

  test("counter - a page's next event waits until the one before is delivered; other pages do not wait", async () => {
    const { clock, sender, calls, event, answer } = setUp({}, () => 0);
    sender.send(event("a", "page.occupied"));
    sender.send(event("a", "page.vacated"));
    sender.send(event("a", "page.occupied"));
    sender.send(event("b", "page.occupied"));
    await clock.advance(0);
    expect(calls.map((c) => [c.body.page, c.body.type])).toEqual([
      ["a", "page.occupied"],
      ["b", "page.occupied"],
    ]);
    await answer(503, "a");
    await answer(503, "a");
    await answer(200, "b");
    expect(calls.filter((c) => c.body.page === "a").map((c) => c.body.type)).toEqual(
      Array(3).fill("page.occupied"),
    );
    await answer(200, "a");
    await answer(200, "a");
    await answer(200, "a");
    expect(calls.filter((c) => c.body.page === "a").map((c) => c.body.type)).toEqual([
      "page.occupied",
      "page.occupied",
      "page.occupied",
      "page.vacated",
      "page.occupied",
    ]);
    expect(sender.queued).toBe(0);
  });

  test("counter - an event whose attempt fails once it is as old as the max age is given up, and the page's next one goes", async () => {
    const { clock, sender, calls, event, answer, value } = setUp(
      { maxAgeMs: 10_000, timeoutMs: 60_000 },
      () => 0,
    );
    sender.send(event("a", "page.occupied"));
    await clock.advance(5_000);
    sender.send(event("a", "page.vacated"));
    await clock.advance(4_999);
    await answer(500);
    // 1 ms younger than the max age: retried (at once, the jitter drew 0).
    expect(calls.map((c) => c.body.type)).toEqual(["page.occupied", "page.occupied"]);
    await clock.advance(1);
    await answer(500);
    expect(calls.map((c) => c.body.type)).toEqual(["page.occupied", "page.occupied", "page.vacated"]);
    expect(await value("livecount_counter_webhook_deliveries_total", { result: "gave_up" })).toBe(1);
    await answer(200);
    expect(sender.queued).toBe(0);
  });

  test("counter - an event whose turn comes once it is as old as the max age is given up unsent", async () => {
    const { clock, sender, calls, event, answer, value } = setUp(
      { maxAgeMs: 10_000, timeoutMs: 60_000 },
      () => 0,
    );
    sender.send(event("a", "page.occupied"));
    sender.send(event("a", "page.vacated"));
    await clock.advance(10_000);
    await answer(500);
    expect(calls.map((c) => c.body.type)).toEqual(["page.occupied"]);
    expect(await value("livecount_counter_webhook_deliveries_total", { result: "gave_up" })).toBe(2);
    expect(sender.queued).toBe(0);
  });

  test("counter - at most `concurrency` requests are in flight at once", async () => {
    const { clock, sender, open, event, answer } = setUp({ concurrency: 2 });
    for (const page of ["a", "b", "c", "d"]) sender.send(event(page));
    await clock.advance(0);
    expect(open.map((c) => c.body.page)).toEqual(["a", "b"]);
    open[0]!.respond(200);
    await clock.advance(0);
    expect(open.map((c) => c.body.page)).toEqual(["b", "c"]);
    await answer(200);
    expect(open.map((c) => c.body.page)).toEqual(["d"]);
  });

  test("counter - the queue holds up to its cap; one more event drops the oldest one not being sent", async () => {
    const { clock, sender, calls, event, answer, value } = setUp({ maxQueued: 3, concurrency: 1 });
    sender.send(event("a"));
    await clock.advance(0);
    sender.send(event("b"));
    sender.send(event("c"));
    expect(sender.queued).toBe(3);
    expect(await value("livecount_counter_webhook_dropped_total", { reason: "queue_full" })).toBe(0);
    sender.send(event("d"));
    expect(sender.queued).toBe(3);
    expect(await value("livecount_counter_webhook_dropped_total", { reason: "queue_full" })).toBe(1);
    expect(await value("livecount_counter_webhook_queued")).toBe(3);
    for (let i = 0; i < 3; i++) await answer(200);
    expect(calls.map((c) => c.body.page)).toEqual(["a", "c", "d"]);
  });

  test("counter - a partition that just started serving holds its pages' deliveries until its settle window ends", async () => {
    const { clock, sender, calls, event } = setUp();
    sender.hold(3, clock.monotonic() + 500);
    sender.send(event("held", "page.occupied", 3));
    sender.send(event("free", "page.occupied", 4));
    await clock.advance(499);
    expect(calls.map((c) => c.body.page)).toEqual(["free"]);
    await clock.advance(1);
    expect(calls.map((c) => c.body.page)).toEqual(["free", "held"]);
  });

  test("counter - a wall clock stepping back delays no retry, hold or max age", async () => {
    const { clock, sender, calls, event, answer } = setUp({ maxAgeMs: 5_000 }, () => 0.9999999);
    sender.hold(3, clock.monotonic() + 500);
    sender.send(event("held", "page.occupied", 3));
    clock.stepWall(-60_000);
    await clock.advance(500);
    expect(calls).toHaveLength(1);
    await answer(500);
    clock.stepWall(-60_000);
    // The retry after its backoff (1 s less 1 ms at this jitter), not a minute later.
    await clock.advance(999);
    expect(calls).toHaveLength(2);
    await answer(500);
    await clock.advance(1_999);
    expect(calls).toHaveLength(3);
    await answer(500);
    // Its age counts on: its next turn (4 s on) comes past the max age, and it is given up then,
    // not kept a further two minutes.
    await clock.advance(4_000);
    expect(calls).toHaveLength(3);
    expect(sender.queued).toBe(0);
  });

  test("counter - closing delivers what is queued if the receiver takes it within the drain time", async () => {
    const { clock, sender, calls, event, answer, value } = setUp();
    sender.send(event("a"));
    const closed = sender.close(1_000);
    sender.send(event("late"));
    await clock.advance(999);
    await answer(200);
    await closed;
    expect(calls.map((c) => c.body.page)).toEqual(["a"]);
    expect(await value("livecount_counter_webhook_deliveries_total", { result: "delivered" })).toBe(1);
    expect(await value("livecount_counter_webhook_dropped_total", { reason: "shutdown" })).toBe(1);
  });

  test("counter - closing drops what the receiver has not taken when the drain time ends, and abandons requests in flight", async () => {
    const { clock, sender, calls, open, event, value } = setUp({ concurrency: 1 });
    sender.send(event("a"));
    sender.send(event("b"));
    let closed = false;
    const closing = sender.close(1_000).then(() => (closed = true));
    await clock.advance(999);
    expect(closed).toBe(false);
    await clock.advance(1);
    await closing;
    expect(open).toHaveLength(0);
    expect(calls[0]!.signal.aborted).toBe(true);
    expect(sender.queued).toBe(0);
    expect(await value("livecount_counter_webhook_dropped_total", { reason: "shutdown" })).toBe(2);
    await clock.advance(60_000);
    expect(calls).toHaveLength(1);
  });
});
