/**
 * Publisher increments leave the gateway in batches, one bus request per owner and turn. Against
 * owners played on an in-memory bus (to inject their answers): every item gets its own answer, one
 * item's error stays its own, a bus failure fails the batch's items alike, and an owner of an
 * earlier release, which refuses the batch as unknown, gets each increment on its own.
 */
import { MemoryBus, nodeSubject } from "@livecount/bus";
import {
  ProtocolError,
  decodeNodeRequest,
  encodeMessage,
  type IncrementReply,
  type IncrementRequest,
  type NodeReply,
} from "@livecount/protocol";
import { systemClock } from "@livecount/runtime";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { GatewayMetrics } from "../src/gateway_metrics.js";
import { IncrementBatcher } from "../src/increment_batcher.js";
import { OwnerClient } from "../src/owner_client.js";
import { soleOwnerMembership } from "./fixtures/sole_owner.js";

const OWNER = "owner-1";
const TIMEOUT_MS = 300;

const incremented = (r: IncrementRequest, value: number): IncrementReply => ({
  type: "incremented",
  page: r.page,
  counter: r.counter,
  value,
  updatedAt: 1,
  duplicate: false,
});

describe("gateway - increment batches", () => {
  const stops: Array<() => void | Promise<void>> = [];
  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop();
  });

  /** A batcher whose only owner answers each bus request with `answer` (undefined: never). */
  function setUp(answer: (request: ReturnType<typeof decodeNodeRequest>) => NodeReply | undefined) {
    const bus = new MemoryBus({ clock: systemClock });
    stops.push(() => bus.close());
    const membership = soleOwnerMembership(bus, "dc1", OWNER);
    stops.push(() => membership.stop());
    const seen: string[] = [];
    bus.serve(nodeSubject("dc1", OWNER), async (data) => {
      const request = decodeNodeRequest(data);
      seen.push(request.type === "increments" ? `increments(${request.items.length})` : request.type);
      const reply = answer(request);
      return reply === undefined ? new Promise<Uint8Array>(() => {}) : encodeMessage(reply);
    });
    const metrics = new GatewayMetrics(new Registry());
    const owners = new OwnerClient(bus, membership, "dc1", TIMEOUT_MS);
    return { batcher: new IncrementBatcher(owners, systemClock, metrics), seen };
  }

  const request = (i: number, page = "hot"): IncrementRequest => ({
    type: "increment",
    page,
    counter: "likes",
    delta: 1,
    key: `k${i}`,
  });

  /** Every promise's outcome: the reply's value, or the error's code. */
  const outcomes = (all: Array<Promise<IncrementReply>>): Promise<Array<number | string>> =>
    Promise.all(
      all.map((p) =>
        p.then(
          (r) => r.value,
          (err: unknown) => (err instanceof ProtocolError ? err.code : "?"),
        ),
      ),
    );

  test("batch - increments of one turn go in one request and each gets its own answer, in order", async () => {
    const { batcher, seen } = setUp((r) =>
      r.type === "increments"
        ? {
            type: "increments_done",
            replies: r.items.map((item, i) =>
              i === 2
                ? { type: "error", code: "idempotency_conflict", message: "used for another change" }
                : incremented(item, i + 1),
            ),
          }
        : undefined,
    );
    const all = Array.from({ length: 5 }, (_, i) => batcher.increment(request(i)));
    expect(await outcomes(all)).toEqual([1, 2, "idempotency_conflict", 4, 5]);
    expect(seen).toEqual(["increments(5)"]);
    // Alone in its turn, an increment goes as a plain request.
    const { batcher: single, seen: singleSeen } = setUp((r) =>
      r.type === "increment" ? incremented(r, 7) : undefined,
    );
    expect(await outcomes([single.increment(request(9))])).toEqual([7]);
    expect(singleSeen).toEqual(["increment"]);
  });

  test("batch - an owner that does not answer fails every item of the batch with timeout", async () => {
    const { batcher, seen } = setUp(() => undefined);
    const all = Array.from({ length: 3 }, (_, i) => batcher.increment(request(i)));
    expect(await outcomes(all)).toEqual(["timeout", "timeout", "timeout"]);
    expect(seen).toEqual(["increments(3)"]);
  });

  test("batch - an owner of an earlier release refuses the batch as unknown: each increment goes on its own", async () => {
    let value = 0;
    const { batcher, seen } = setUp((r) =>
      r.type === "increments"
        ? { type: "error", code: "bad_frame", message: 'unknown message type "increments"' }
        : r.type === "increment"
          ? incremented(r, ++value)
          : undefined,
    );
    const all = Array.from({ length: 4 }, (_, i) => batcher.increment(request(i)));
    expect((await outcomes(all)).sort()).toEqual([1, 2, 3, 4]);
    expect(seen).toEqual(["increments(4)", "increment", "increment", "increment", "increment"]);
  });
});
