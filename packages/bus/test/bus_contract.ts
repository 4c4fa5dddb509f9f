/**
 * The behaviour every Bus must have, run against MemoryBus and NatsBus (memory_bus.test.ts,
 * nats_bus.test.ts). `open` returns two handles on one broker: `sub` for subscribers and
 * responders, `pub` for publishers and requesters. For NATS they are two connections; for the
 * in-memory bus, one instance twice.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  BusClosedError,
  BusTimeoutError,
  InvalidSubjectError,
  NoRespondersError,
  pageSubject,
  ResponderError,
  type Bus,
  type Subscription,
} from "../src/index.js";

export interface BusPair {
  readonly sub: Bus;
  readonly pub: Bus;
}

const WAIT_TIMEOUT_MS = 10_000;
const WAIT_POLL_MS = 5;
/** Short enough to keep the suite fast, long enough for a loaded CI machine's round trip. */
const SHORT_TIMEOUT_MS = 150;
const FIFO_MESSAGES = 10_000;
const QUEUE_MESSAGES = 300;
const REQUESTS = 50;

const encoder = new TextEncoder();
const decoder = new TextDecoder();
export const bytes = (s: string): Uint8Array => encoder.encode(s);
export const text = (b: Uint8Array): string => decoder.decode(b);

export async function waitFor(what: string, cond: () => boolean): Promise<void> {
  const deadline = Date.now() + WAIT_TIMEOUT_MS;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, WAIT_POLL_MS));
  }
}

/** Subscribes and records "<subject> <payload>" lines. */
export function record(
  bus: Bus,
  subject: string,
  opts?: { queue?: string },
): { got: string[]; sub: Subscription } {
  const got: string[] = [];
  const sub = bus.subscribe(subject, (data, s) => got.push(`${s} ${text(data)}`), opts);
  return { got, sub };
}

export function busContract(name: string, open: () => Promise<BusPair>): void {
  describe(`${name} - bus contract`, () => {
    let sub: Bus;
    let pub: Bus;

    beforeEach(async () => {
      ({ sub, pub } = await open());
    });

    afterEach(async () => {
      await Promise.all([sub.close(), pub.close()]);
    });

    /** Subscriptions made on `sub` so far are known to the broker. */
    const ready = (): Promise<void> => sub.flush();
    /** Everything `pub` published so far has reached `sub`'s handlers. */
    const delivered = async (): Promise<void> => {
      await pub.flush();
      await sub.flush();
    };

    it("delivers a message to an exact subscriber with its subject", async () => {
      const { got } = record(sub, "t.a");
      await ready();
      pub.publish("t.a", bytes("hello"));
      await waitFor("the message", () => got.length === 1);
      expect(got).toEqual(["t.a hello"]);
    });

    it("matches exactly one token with '*'", async () => {
      const { got } = record(sub, "t.*");
      await ready();
      for (const s of ["t", "t.a", "t.a.b", "u.a", "t.b"]) pub.publish(s, bytes("x"));
      await delivered();
      await waitFor("two messages", () => got.length >= 2);
      await delivered();
      expect(got).toEqual(["t.a x", "t.b x"]);
    });

    it("matches one or more trailing tokens with '>'", async () => {
      const { got } = record(sub, "t.>");
      await ready();
      for (const s of ["t", "t.a", "t.a.b", "u.a"]) pub.publish(s, bytes("x"));
      await waitFor("two messages", () => got.length >= 2);
      await delivered();
      expect(got).toEqual(["t.a x", "t.a.b x"]);
    });

    it("delivers one message once to each matching subscription", async () => {
      const exact = record(sub, "t.a");
      const star = record(sub, "t.*");
      const rest = record(sub, ">");
      await ready();
      pub.publish("t.a", bytes("1"));
      await waitFor("three deliveries", () => exact.got.length + star.got.length + rest.got.length >= 3);
      await delivered();
      expect([exact.got, star.got, rest.got]).toEqual([["t.a 1"], ["t.a 1"], ["t.a 1"]]);
    });

    it("stops delivery after unsubscribe", async () => {
      const gone = record(sub, "t.a");
      const sentinel = record(sub, "t.a");
      await ready();
      pub.publish("t.a", bytes("1"));
      await waitFor("the first message", () => gone.got.length === 1);
      gone.sub.unsubscribe();
      gone.sub.unsubscribe();
      await ready();
      pub.publish("t.a", bytes("2"));
      await waitFor("the sentinel", () => sentinel.got.length === 2);
      await delivered();
      expect(gone.got).toEqual(["t.a 1"]);
    });

    it("delivers each message to exactly one member of a queue group, and to every plain subscriber", async () => {
      const members = [
        record(sub, "q.*", { queue: "workers" }),
        record(sub, "q.a", { queue: "workers" }),
        record(pub, "q.a", { queue: "workers" }),
      ];
      const plain = record(sub, "q.a");
      await Promise.all([sub.flush(), pub.flush()]);
      for (let i = 0; i < QUEUE_MESSAGES; i++) pub.publish("q.a", bytes(String(i)));
      await waitFor("every message", () => plain.got.length === QUEUE_MESSAGES);
      await waitFor(
        "every queued message",
        () => members.reduce((n, m) => n + m.got.length, 0) >= QUEUE_MESSAGES,
      );
      await delivered();
      const queued = members.flatMap((m) => m.got);
      expect(queued).toHaveLength(QUEUE_MESSAGES);
      expect(new Set(queued).size).toBe(QUEUE_MESSAGES);
      expect(plain.got).toHaveLength(QUEUE_MESSAGES);
    });

    it("answers a request with the responder's reply, sync or async", async () => {
      sub.serve("svc.upper", (data) => bytes(text(data).toUpperCase()));
      sub.serve("echo.*", async (data, subject) => bytes(`${subject}:${text(data)}`));
      await ready();
      expect(text(await pub.request("svc.upper", bytes("abc")))).toBe("ABC");
      expect(text(await pub.request("echo.x", bytes("abc")))).toBe("echo.x:abc");
    });

    it("answers each request once from a queue group of responders", async () => {
      const answered = { first: 0, second: 0 };
      sub.serve("svc.q", () => (answered.first++, bytes("first")), { queue: "svc" });
      sub.serve("svc.q", () => (answered.second++, bytes("second")), { queue: "svc" });
      await ready();
      const replies = await Promise.all(
        Array.from({ length: REQUESTS }, () => pub.request("svc.q", bytes(""))),
      );
      const counts = { first: 0, second: 0 };
      for (const reply of replies) counts[text(reply) as keyof typeof counts]++;
      await delivered();
      expect(answered.first + answered.second).toBe(REQUESTS);
      expect(counts).toEqual(answered);
    });

    it("passes an empty reply through as a valid reply", async () => {
      sub.serve("svc.empty", () => new Uint8Array(0));
      await ready();
      expect(await pub.request("svc.empty", bytes("x"))).toHaveLength(0);
    });

    it("rejects with ResponderError when the responder throws or rejects", async () => {
      sub.serve("svc.throws", () => {
        throw new RangeError("no such page");
      });
      sub.serve("svc.rejects", () => Promise.reject(new Error("store down")));
      await ready();
      await expect(pub.request("svc.throws", bytes(""))).rejects.toThrow(ResponderError);
      await expect(pub.request("svc.throws", bytes(""))).rejects.toThrow(
        "responder on svc.throws failed: RangeError: no such page",
      );
      await expect(pub.request("svc.rejects", bytes(""))).rejects.toThrow(
        "responder on svc.rejects failed: Error: store down",
      );
    });

    it("times out a request nobody answers with BusTimeoutError", async () => {
      sub.serve("svc.silent", () => new Promise<Uint8Array>(() => {}));
      record(sub, "svc.listener");
      await ready();
      await expect(pub.request("svc.silent", bytes(""), { timeoutMs: SHORT_TIMEOUT_MS })).rejects.toThrow(
        BusTimeoutError,
      );
      // A plain subscriber is interest, not a responder: the request times out, as on NATS.
      await expect(pub.request("svc.listener", bytes(""), { timeoutMs: SHORT_TIMEOUT_MS })).rejects.toThrow(
        BusTimeoutError,
      );
    });

    it("rejects a request on a subject without subscribers with NoRespondersError", async () => {
      await expect(pub.request("svc.nobody", bytes(""), { timeoutMs: WAIT_TIMEOUT_MS })).rejects.toThrow(
        NoRespondersError,
      );
    });

    it(`keeps the publish order of ${FIFO_MESSAGES} messages for each subscriber`, async () => {
      const exact: number[] = [];
      const wild: number[] = [];
      sub.subscribe("fifo.a", (data) => exact.push(Number(text(data))));
      sub.subscribe("fifo.>", (data) => wild.push(Number(text(data))));
      await ready();
      for (let i = 0; i < FIFO_MESSAGES; i++) pub.publish("fifo.a", bytes(String(i)));
      await waitFor("every message", () => exact.length === FIFO_MESSAGES && wild.length === FIFO_MESSAGES);
      const expected = Array.from({ length: FIFO_MESSAGES }, (_, i) => i);
      expect(exact).toEqual(expected);
      expect(wild).toEqual(expected);
    });

    it("isolates a throwing handler from other subscribers and from its own later messages", async () => {
      let calls = 0;
      sub.subscribe("t.boom", () => {
        calls++;
        throw new Error("handler bug");
      });
      const healthy = record(sub, "t.boom");
      await ready();
      for (let i = 0; i < 3; i++) pub.publish("t.boom", bytes(String(i)));
      await waitFor("every message", () => healthy.got.length === 3);
      await delivered();
      expect(calls).toBe(3);
      expect(healthy.got).toEqual(["t.boom 0", "t.boom 1", "t.boom 2"]);
    });

    it("rejects pending requests with BusClosedError on close, and refuses work afterwards", async () => {
      sub.serve("svc.slow", () => new Promise<Uint8Array>(() => {}));
      await ready();
      const pending = expect(
        pub.request("svc.slow", bytes(""), { timeoutMs: WAIT_TIMEOUT_MS }),
      ).rejects.toThrow(BusClosedError);
      await pub.flush();
      await pub.close();
      await pending;
      expect(pub.status).toBe("closed");
      expect(() => pub.publish("t.a", bytes(""))).toThrow(BusClosedError);
      expect(() => pub.subscribe("t.a", () => {})).toThrow(BusClosedError);
      await expect(pub.request("svc.slow", bytes(""))).rejects.toThrow(BusClosedError);
      await expect(pub.close()).resolves.toBeUndefined();
    });

    it("rejects malformed subjects with InvalidSubjectError", async () => {
      for (const bad of ["", "a b", "a..b", ".a", "a.", "a.*", "a.>", "a\tb", "a\r\nPUB x 1"]) {
        expect(() => pub.publish(bad, bytes("")), JSON.stringify(bad)).toThrow(InvalidSubjectError);
      }
      for (const bad of ["", "a b", "a..b", "a.>.b", "a*", "a.b>", ">.a"]) {
        expect(() => sub.subscribe(bad, () => {}), JSON.stringify(bad)).toThrow(InvalidSubjectError);
      }
      expect(() => sub.subscribe("a", () => {}, { queue: "bad queue" })).toThrow(InvalidSubjectError);
      await expect(pub.request("a.*", bytes(""))).rejects.toThrow(InvalidSubjectError);
    });

    it("keeps pages named '>', 'a.*', 'a b' and 'a' apart", async () => {
      const pages = [">", "*", "a.*", "a.>", "a b", "a", "a.b", "a.b.c"];
      const got = new Map(pages.map((p) => [p, record(sub, pageSubject(p, 7)).got]));
      await ready();
      for (const p of pages) pub.publish(pageSubject(p, 7), bytes(p));
      await waitFor("every page", () => [...got.values()].every((g) => g.length >= 1));
      await delivered();
      for (const p of pages) expect(got.get(p), p).toEqual([`${pageSubject(p, 7)} ${p}`]);
    });
  });
}
