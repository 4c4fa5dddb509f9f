/**
 * A stopping gateway's HTTP requests (HttpRequests), on a manual clock and a response that records
 * what is written: those in progress finish within the deadline, new ones and late ones get 503 with
 * Retry-After and their connection closed, and no request is answered twice.
 */
import type { HttpResponse } from "uWebSockets.js";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Reply, type RequestInfo } from "../src/http_io.js";
import { HttpRequests } from "../src/http_requests.js";

/** What a response was sent: status, headers, body, and whether its connection was to close. */
interface Sent {
  status?: string;
  headers: Record<string, string>;
  body?: string;
  close?: boolean;
  ends: number;
}

function response(): { res: HttpResponse; sent: Sent } {
  const sent: Sent = { headers: {}, ends: 0 };
  const res = {
    onAborted: () => res,
    cork: (fn: () => void) => {
      fn();
      return res;
    },
    writeStatus: (status: string) => {
      sent.status = status;
      return res;
    },
    writeHeader: (k: string, v: string) => {
      sent.headers[k] = v;
      return res;
    },
    end: (body: string, close: boolean) => {
      sent.body = body;
      sent.close = close;
      sent.ends++;
      return res;
    },
  };
  return { res: res as unknown as HttpResponse, sent };
}

const ORIGIN = "https://news.example";
/** CORS as OriginPolicy gives it for an allowed origin. */
const cors = (origin: string): Record<string, string> => ({ "access-control-allow-origin": origin });
const newRequests = (clock: ManualClock): HttpRequests => new HttpRequests(clock, cors);
/** A browser's read, or another method. */
const info = (method = "GET"): RequestInfo =>
  ({
    method,
    head: false,
    path: "/v1/pages/p/counter",
    query: "",
    headers: { origin: ORIGIN },
  }) as unknown as RequestInfo;

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** A request whose route answers 200 when `done` resolves. */
function request(requests: HttpRequests, done: Promise<void>): Sent {
  const { res, sent } = response();
  const reply = new Reply(res);
  requests.serve(reply, info(), async () => {
    await done;
    reply.json(200, { ok: true });
  });
  return sent;
}

const expectRefused = (sent: Sent): void => {
  expect(sent).toMatchObject({ status: "503 Service Unavailable", close: true, ends: 1 });
  expect(sent.headers["retry-after"]).toBe("1");
  expect(JSON.parse(sent.body!)).toMatchObject({ error: { code: "unavailable" } });
};

describe("gateway - HTTP requests at stop", () => {
  test("gateway - a drain waits for the requests in progress, and refuses new ones meanwhile with 503 and a closed connection", async () => {
    const clock = new ManualClock();
    const requests = newRequests(clock);
    const first = deferred();
    const inProgress = request(requests, first.promise);
    expect(requests.pending).toBe(1);
    let late: number | undefined;
    const drained = requests.drain(1000).then((n) => (late = n));
    await clock.advance(999);
    expect(late).toBeUndefined();
    const refused = request(requests, Promise.resolve());
    expectRefused(refused);
    // A browser's read sees the 503, not a CORS failure.
    expect(refused.headers["access-control-allow-origin"]).toBe(ORIGIN);
    first.resolve();
    await drained;
    expect(late).toBe(0);
    expect(inProgress).toMatchObject({ status: "200 OK", close: false, ends: 1 });
  });

  test("gateway - a request still in progress at the deadline gets 503, and its route's answer later is not written", async () => {
    const clock = new ManualClock();
    const requests = newRequests(clock);
    const slow = deferred();
    const sent = request(requests, slow.promise);
    const drained = requests.drain(1000);
    await clock.advance(1000);
    expect(await drained).toBe(1);
    expectRefused(sent);
    slow.resolve();
    await clock.advance(0);
    expect(sent.ends).toBe(1);
    expect(requests.pending).toBe(0);
  });

  test("gateway - a HEAD refused at a stop gets its 503 head without closing first; a reply sent before the deadline is not counted late", async () => {
    const clock = new ManualClock();
    const requests = newRequests(clock);
    const drained = requests.drain(1000);
    await drained;
    const { res, sent } = response();
    const head = new Reply(res, true);
    let headWritten: string | undefined;
    (res as unknown as { endWithoutBody: () => void }).endWithoutBody = () => (headWritten = sent.status);
    requests.serve(head, info(), () => Promise.resolve());
    expect(headWritten).toBe("503 Service Unavailable");
    expect(sent.headers["retry-after"]).toBe("1");

    // Answered, but its route still finishing (a log line, a metric) when the deadline comes.
    const other = newRequests(clock);
    const { res: res2, sent: sent2 } = response();
    const reply = new Reply(res2);
    const routeDone = deferred();
    other.serve(reply, info("PUT"), async () => {
      reply.json(200, { ok: true });
      await routeDone.promise;
    });
    const otherDrained = other.drain(1000);
    await clock.advance(1000);
    expect(await otherDrained).toBe(0);
    expect(sent2).toMatchObject({ status: "200 OK", ends: 1 });
    routeDone.resolve();
  });

  test("gateway - with nothing in progress a drain ends at once", async () => {
    const clock = new ManualClock();
    const requests = newRequests(clock);
    expect(request(requests, Promise.resolve())).toMatchObject({ ends: 0 });
    await clock.advance(0);
    expect(requests.pending).toBe(0);
    expect(await requests.drain(60_000)).toBe(0);
  });
});
