import {
  HOLD_LEFT,
  ProtocolError,
  activeOfCode,
  encodeMessage,
  holdCode,
  opsOf,
  socketsOfCode,
  type HoldCode,
  type NodeReply,
  type NodeRequest,
  type PresenceSync,
  type PresenceSyncPart,
} from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger, systemClock } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { LocalPresence } from "../src/local_presence.js";
import type { OwnerClient } from "../src/owner_client.js";
import { pageBytes, presenceChunks, viewerBytes } from "../src/presence_chunks.js";
import { PresenceForwarder } from "../src/presence_forwarder.js";

const PARTITIONS = 8;
/** A small bound, so a few hundred viewers pass it (the product's is 512 KiB). */
const MAX_BYTES = 16 * 1024;
const GATEWAY = "gw-1";

/** A 128-character viewer key, the longest a viewer id makes (`v:` and the id). */
const keyOf = (i: number): string => `v:${String(i).padStart(126, "0")}`;

/** Pages of one partition. */
function pagesOf(partition: number, count: number): string[] {
  const pages: string[] = [];
  for (let i = 0; pages.length < count; i++)
    if (partitionOf(`page-${i}`, PARTITIONS) === partition) pages.push(`page-${i}`);
  return pages;
}

/**
 * A partition's owner as far as presence goes: what each page holds of this gateway's viewers, by
 * the rules of the counter node's intake (a sync replaces the pages it names and the pages the
 * gateway held; a batch sets each viewer's hold, a departure ends it), and every request's size as
 * the bus would carry it.
 */
class Owner {
  readonly held = new Map<string, Map<string, HoldCode>>();
  readonly notVisitors = new Map<string, Set<string>>();
  readonly requests: NodeRequest[] = [];
  readonly sizes: number[] = [];
  /** Fails the request with this index (0-based), once. */
  failAt: number | undefined;
  /** Of a release before resyncs in parts: refuses them as an unknown type. */
  earlier = false;
  /** The parts of a resync gathered so far. */
  #parts: PresenceSyncPart[] = [];

  request(_partition: number, request: NodeRequest): Promise<NodeReply> {
    const index = this.requests.length;
    this.requests.push(request);
    this.sizes.push(encodeMessage(request).length);
    if (index === this.failAt) return Promise.reject(new ProtocolError("unavailable"));
    if (request.type === "presence_sync_part") {
      if (this.earlier)
        return Promise.reject(new ProtocolError("bad_frame", 'unknown message type "presence_sync_part"'));
      expect(request.part).toBe(this.#parts.length);
      this.#parts.push(request);
      // The last part: all of them as one sync.
      if (request.part === request.parts - 1) this.#sync(this.#parts.splice(0));
    } else if (request.type === "presence_sync") this.#sync([request]);
    else if (request.type === "presence_pages") {
      for (const [page, transitions] of request.pages) {
        const viewers = this.held.get(page) ?? new Map<string, HoldCode>();
        this.held.set(page, viewers);
        for (let i = 0; i < transitions.length; i += 2) {
          const code = transitions[i + 1] as HoldCode;
          if (code > HOLD_LEFT) viewers.set(transitions[i] as string, code);
          else viewers.delete(transitions[i] as string);
        }
      }
      for (const [page, viewers] of request.unvisited ?? [])
        for (const v of viewers) this.#notVisitor(page, v);
    }
    return Promise.resolve({ type: "ack" });
  }

  /** One sync, in one or more parts: it replaces the pages it names and the pages held before. */
  #sync(parts: ReadonlyArray<Omit<PresenceSync, "type">>): void {
    const named = new Map<string, Map<string, HoldCode>>();
    for (const sync of parts)
      for (const [page, viewers] of Object.entries(sync.pages)) {
        const passive = new Set(sync.passive?.[page] ?? []);
        const holds = named.get(page) ?? new Map<string, HoldCode>();
        viewers.forEach((v, i) => holds.set(v, holdCode(sync.sockets?.[page]?.[i] ?? 1, !passive.has(v))));
        named.set(page, holds);
        for (const v of sync.unvisited?.[page] ?? []) this.#notVisitor(page, v);
      }
    for (const page of new Set([...this.held.keys(), ...named.keys()]))
      this.held.set(page, named.get(page) ?? new Map());
  }

  #notVisitor(page: string, viewer: string): void {
    const set = this.notVisitors.get(page) ?? new Set();
    this.notVisitors.set(page, set.add(viewer));
  }
}

function forwarder(owner: Owner, presence: LocalPresence): PresenceForwarder {
  return new PresenceForwarder({
    owners: owner as unknown as OwnerClient,
    presence,
    clock: systemClock,
    logger: silentLogger,
    gateway: GATEWAY,
    partitions: PARTITIONS,
    batchMs: 1,
    retryMs: 20,
    maxRetryMs: 20,
    random: () => 1,
    maxRequestBytes: () => MAX_BYTES,
  });
}

/** What the gateway holds, per page, as hold codes: what the owner must end up with. */
function heldBy(presence: LocalPresence): Map<string, Map<string, HoldCode>> {
  return new Map(
    [...presence.pages()].map((page) => [
      page,
      new Map(presence.holdsOf(page).map(([v, h]) => [v, holdCode(h.sockets, h.active)])),
    ]),
  );
}

describe("gateway - presence cut into requests the bus carries", () => {
  test("gateway - chunks stay within the bound as encoded, keep every transition in order, and a small partition is one", () => {
    const page = "page-a";
    const viewers: Array<[string, HoldCode]> = [];
    for (let i = 0; i < 600; i++)
      viewers.push([keyOf(i), i % 3 === 0 ? holdCode(2, false) : holdCode(1, true)]);
    // The same viewer again, later: its later transition must not go first.
    viewers.push([keyOf(5), HOLD_LEFT]);
    const unvisited = new Map([[page, new Set([keyOf(1), keyOf(400)])]]);
    const chunks = presenceChunks([[page, viewers]], unvisited, MAX_BYTES);
    expect(chunks.length).toBeGreaterThan(3);
    for (const chunk of chunks) {
      const request = {
        type: "presence_pages" as const,
        gateway: GATEWAY,
        partition: 3,
        pages: chunk.pages,
        reconnects: 12,
        unvisited: [...chunk.unvisited].map(([p, v]) => [p, [...v]] as const),
      };
      expect(encodeMessage(request).length).toBeLessThanOrEqual(MAX_BYTES);
    }
    const flat = chunks.flatMap((c) => c.pages.flatMap(([, t]) => [...t]));
    expect(flat).toEqual(viewers.flat());
    expect(chunks.reduce((n, c) => n + c.count, 0)).toBe(viewers.length);
    expect(chunks.flatMap((c) => [...(c.unvisited.get(page) ?? [])]).sort()).toEqual([keyOf(1), keyOf(400)]);

    expect(presenceChunks([[page, viewers.slice(0, 10)]], new Map(), MAX_BYTES)).toHaveLength(1);
    // Nothing to say is still one request: a sync of nothing tells the owner the gateway holds nothing.
    expect(presenceChunks([], new Map(), MAX_BYTES)).toEqual([{ pages: [], unvisited: new Map(), count: 0 }]);
    // A page of one viewer never counts for less than it takes in either form: a batch's hold and
    // non-visitor, a sync's id, socket count, `passive` and non-visitor.
    const size = (request: NodeRequest): number => encodeMessage(request).length;
    const base = { gateway: GATEWAY, partition: 3 };
    for (const [v, code] of viewers.slice(0, 4)) {
      const batch =
        size({ ...base, type: "presence_pages", pages: [[page, [v, code]]], unvisited: [[page, [v]]] }) -
        size({ ...base, type: "presence_pages", pages: [] });
      const idle = activeOfCode(code) ? {} : { passive: { [page]: [v] } };
      const sync =
        size({
          ...base,
          type: "presence_sync",
          pages: { [page]: [v] },
          sockets: { [page]: [socketsOfCode(code)] },
          unvisited: { [page]: [v] },
          ...idle,
        }) - size({ ...base, type: "presence_sync", pages: {} });
      expect(pageBytes(page) + viewerBytes(page, v, code, true)).toBeGreaterThanOrEqual(
        Math.max(batch, sync),
      );
      // An owner of an earlier release gets ops, the page named in each.
      const ops =
        size({ ...base, type: "presence", ops: opsOf([page, [v, code]]) }) -
        size({ ...base, type: "presence", ops: [] });
      expect(viewerBytes(page, v, code, false, true)).toBeGreaterThanOrEqual(ops);
    }
  });

  for (const earlier of [false, true])
    test(`gateway - a resync past what one request carries goes in ${earlier ? "a sync and joins to an owner that does not know parts" : "parts the owner applies as one"}: it ends with every hold, socket count, attention and non-visitor`, async () => {
      const owner = new Owner();
      owner.earlier = earlier;
      const presence = new LocalPresence();
      const f = forwarder(owner, presence);
      const [big, small] = pagesOf(2, 2) as [string, string];
      // Ten tabs of one viewer, idle viewers, and viewers past their address's budget of new ids.
      for (let i = 0; i < 400; i++) presence.add(big, keyOf(i), i % 4 !== 0, i % 50 !== 0);
      for (let i = 0; i < 9; i++) presence.add(big, keyOf(7), true);
      presence.add(small, keyOf(1), true);
      f.resyncAll();
      await eventually(() => expect(f.idle).toBe(true), { timeoutMs: 5000 });

      const types = owner.requests.map((r) => r.type);
      expect(types.length).toBeGreaterThan(2);
      if (earlier) {
        // Refused as a part, then the first part as a sync, the rest as joins; once only.
        expect(types.slice(0, 2)).toEqual(["presence_sync_part", "presence_sync"]);
        expect(types.slice(2).every((t) => t === "presence_pages")).toBe(true);
        f.resyncAll();
        await eventually(() => expect(f.idle).toBe(true), { timeoutMs: 5000 });
        expect(owner.requests.filter((r) => r.type === "presence_sync_part")).toHaveLength(1);
      } else {
        expect(types.every((t) => t === "presence_sync_part")).toBe(true);
        expect(owner.requests.map((r) => (r.type === "presence_sync_part" ? [r.part, r.parts] : []))).toEqual(
          types.map((_, i) => [i, types.length]),
        );
      }
      expect(Math.max(...owner.sizes)).toBeLessThanOrEqual(MAX_BYTES);
      expect(owner.held).toEqual(heldBy(presence));
      expect(socketsOfCode(owner.held.get(big)!.get(keyOf(7))!)).toBe(10);
      expect(activeOfCode(owner.held.get(big)!.get(keyOf(4))!)).toBe(false);
      expect([...owner.notVisitors.get(big)!].sort()).toEqual(
        Array.from({ length: 8 }, (_, i) => keyOf(i * 50)).sort(),
      );
      f.close();
    });

  test("gateway - a burst of joins past one request goes in several, in order; a failure sends again only what was not acknowledged", async () => {
    const owner = new Owner();
    const presence = new LocalPresence();
    const f = forwarder(owner, presence);
    const [page] = pagesOf(5, 1) as [string];
    owner.failAt = 1;
    for (let i = 0; i < 300; i++) f.enqueue(page, keyOf(i), presence.add(page, keyOf(i), true));
    await eventually(() => expect(f.idle).toBe(true), { timeoutMs: 5000 });

    expect(owner.requests.every((r) => r.type === "presence_pages")).toBe(true);
    expect(Math.max(...owner.sizes)).toBeLessThanOrEqual(MAX_BYTES);
    expect(owner.held).toEqual(heldBy(presence));
    // The first request was acknowledged before the second failed: none of its joins went again.
    const sentOf = (r: NodeRequest): string[] =>
      r.type === "presence_pages" ? r.pages.flatMap(([, t]) => t.filter((x) => typeof x === "string")) : [];
    const first = new Set(sentOf(owner.requests[0]!));
    expect(
      owner.requests
        .slice(2)
        .flatMap(sentOf)
        .filter((v) => first.has(v)),
    ).toEqual([]);
    expect(new Set(owner.requests.flatMap(sentOf)).size).toBe(300);
    f.close();
  });
});
