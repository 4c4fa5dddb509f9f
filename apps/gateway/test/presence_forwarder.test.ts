import {
  HOLD_DROPPED,
  HOLD_LEFT,
  ProtocolError,
  holdCode,
  type NodeReply,
  type NodeRequest,
} from "@livecount/protocol";
import { HashRing, partitionOf } from "@livecount/ring";
import { silentLogger, systemClock } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { LocalPresence } from "../src/local_presence.js";
import type { OwnerClient } from "../src/owner_client.js";
import { MAX_PRESENCE_REQUEST_BYTES } from "../src/presence_chunks.js";
import { PresenceForwarder } from "../src/presence_forwarder.js";

const PARTITIONS = 8;

/** What an owner of an earlier release answers a presence_pages batch (its decoder's words). */
const UNKNOWN_TYPE = new ProtocolError("bad_frame", 'unknown message type "presence_pages"');

/** A promise and the functions that settle it. */
function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Owners as the ring says; requests to a dead owner hang (the fault injected here). */
class Owners {
  owner = "old";
  readonly dead = new Set<string>();
  /** Owners of an earlier release: they refuse `presence_pages` as bad_frame, as such an owner does. */
  readonly earlier = new Set<string>();
  /** Owners that fail every request as unavailable (a partition not owned yet). */
  readonly refusing = new Set<string>();
  readonly sent: Array<{ owner: string; request: NodeRequest }> = [];
  /** The answer to the next request, settled by the test when it chooses. */
  next: Promise<NodeReply> | undefined;

  request(_partition: number, request: NodeRequest): Promise<NodeReply> {
    const owner = this.owner;
    this.sent.push({ owner, request });
    const next = this.next;
    this.next = undefined;
    if (next !== undefined) return next;
    if (this.dead.has(owner)) return new Promise(() => {});
    if (this.refusing.has(owner)) return Promise.reject(new ProtocolError("unavailable"));
    if (this.earlier.has(owner) && request.type === "presence_pages") return Promise.reject(UNKNOWN_TYPE);
    return Promise.resolve({ type: "ack" });
  }
}

/** Every partition moves from owner "old" to owner "new", as the ring tells the forwarder. */
function moveToNew(f: PresenceForwarder, owners: Owners): void {
  owners.owner = "new";
  f.onRingChange(
    new HashRing(["new"], { partitions: PARTITIONS }),
    new HashRing(["old"], { partitions: PARTITIONS }),
    new Set(),
  );
}

function forwarder(
  owners: Owners,
  presence: LocalPresence,
  retryMs = 10_000,
  { clock = systemClock, batchMs = 1, maxRequestBytes = MAX_PRESENCE_REQUEST_BYTES } = {},
): PresenceForwarder {
  return new PresenceForwarder({
    owners: owners as unknown as OwnerClient,
    presence,
    clock,
    logger: silentLogger,
    gateway: "gw-1",
    partitions: PARTITIONS,
    batchMs,
    retryMs,
    maxRetryMs: retryMs,
    random: () => 1,
    maxRequestBytes: () => maxRequestBytes,
  });
}

describe("gateway - presence forwarder", () => {
  test("gateway - a new owner gets the full presence at once, even while a batch hangs on the dead one", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence);
    owners.dead.add("old");
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", true));
    await eventually(() => expect(owners.sent).toHaveLength(1));

    // The old owner died with the batch in flight; the ring moves the partition.
    f.enqueue("page-a", "v:2", presence.add("page-a", "v:2", true));
    moveToNew(f, owners);
    const sync = await eventually(
      () => {
        const s = owners.sent.find((x) => x.owner === "new" && x.request.type === "presence_sync");
        expect(s).toBeDefined();
        return s!.request;
      },
      { timeoutMs: 1000 },
    );
    expect(sync).toMatchObject({ type: "presence_sync", pages: { "page-a": ["v:1", "v:2"] } });
    f.close();
  });

  test("gateway - a resync names the viewers that joined here past their address's budget, as long as they stay", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence);
    // v:1 arrived past its budget; a second socket of it, within budget, changes nothing: it was
    // not a visitor when it arrived. v:2 arrived as a visitor.
    presence.add("page-a", "v:1", true, false);
    presence.add("page-a", "v:2", false);
    expect(presence.add("page-a", "v:1", false, true)).toEqual({ sockets: 2, active: true });
    expect(presence.setActive("page-a", "v:1", false)).toEqual({ sockets: 2, active: false });
    expect(presence.remove("page-a", "v:1", false)).toEqual({ sockets: 1, active: false });
    expect(presence.unvisitedOf("page-a")).toEqual(["v:1"]);
    f.resyncAll();
    await eventually(() => expect(owners.sent).toHaveLength(1));
    expect(owners.sent[0]!.request).toMatchObject({
      type: "presence_sync",
      pages: { "page-a": ["v:1", "v:2"] },
      passive: { "page-a": ["v:1", "v:2"] },
      unvisited: { "page-a": ["v:1"] },
    });
    // Gone and back within budget: a visitor like any other; nothing unvisited is left to name.
    expect(presence.remove("page-a", "v:1", false)).toBeUndefined();
    presence.add("page-a", "v:1", true, true);
    expect(presence.unvisitedOf("page-a")).toEqual([]);
    f.resyncAll();
    await eventually(() => expect(owners.sent).toHaveLength(2));
    expect(owners.sent[1]!.request).not.toHaveProperty("unvisited");
    f.close();
  });

  test("gateway - an op made while a sync is pending is folded into it; later ops follow it", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence);
    presence.add("__proto__", "v:1", true);
    presence.add("__proto__", "v:2", true);
    f.resyncAll();
    // Before the sync goes out: the sync carries the state, no separate op.
    f.enqueue("__proto__", "v:2", presence.remove("__proto__", "v:2", true));
    await eventually(() => expect(owners.sent).toHaveLength(1));
    const sync = owners.sent[0]!.request as unknown as { type: string; pages: Record<string, string[]> };
    expect(sync.type).toBe("presence_sync");
    // A page named "__proto__" is a page like any other in the sync.
    expect(Object.hasOwn(sync.pages, "__proto__")).toBe(true);
    expect(sync.pages["__proto__"]).toEqual(["v:1"]);
    f.enqueue("__proto__", "v:1", presence.remove("__proto__", "v:1", true));
    await eventually(() => expect(owners.sent).toHaveLength(2));
    expect(owners.sent[1]!.request).toMatchObject({
      type: "presence_pages",
      pages: [["__proto__", ["v:1", HOLD_LEFT]]],
    });
    f.close();
  });

  test("gateway - after its bus comes back every partition resyncs, and what it sends carries how often it came back (absent before), in both forms", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence);
    presence.add("pa", "v:1", true);
    f.enqueue("pa", "v:1", presence.add("pa", "v:2", true));
    await eventually(() => expect(owners.sent).toHaveLength(1));
    expect(owners.sent[0]!.request).not.toHaveProperty("reconnects");
    f.reconnected();
    await eventually(() => expect(owners.sent).toHaveLength(2));
    expect(owners.sent[1]!.request).toMatchObject({ type: "presence_sync", reconnects: 1 });
    f.enqueue("pa", "v:3", presence.add("pa", "v:3", true));
    await eventually(() => expect(owners.sent).toHaveLength(3));
    expect(owners.sent[2]!.request).toMatchObject({ type: "presence_pages", reconnects: 1 });
    // An owner of an earlier release gets presence ops, with the count too (it ignores it).
    owners.earlier.add("old");
    f.reconnected();
    await eventually(() => expect(owners.sent).toHaveLength(4));
    expect(owners.sent[3]!.request).toMatchObject({ type: "presence_sync", reconnects: 2 });
    f.enqueue("pa", "v:4", presence.add("pa", "v:4", true));
    await eventually(() => expect(owners.sent.map((s) => s.request.type)).toContain("presence"));
    expect(owners.sent.find((s) => s.request.type === "presence")!.request).toMatchObject({ reconnects: 2 });
    f.close();
  });

  test("gateway - transitions within LIVECOUNT_PRESENCE_BATCH_MS of the first share its batch; one after it waits for the next", async () => {
    const BATCH_MS = 50;
    const clock = new ManualClock();
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence, 10_000, { clock, batchMs: BATCH_MS });
    f.enqueue("pa", "v:1", presence.add("pa", "v:1", true));
    await clock.advance(BATCH_MS - 1);
    f.enqueue("pa", "v:2", presence.add("pa", "v:2", true));
    expect(owners.sent).toHaveLength(0);
    await clock.advance(1);
    expect(owners.sent.map((s) => s.request)).toMatchObject([
      { type: "presence_pages", pages: [["pa", ["v:1", holdCode(1, true), "v:2", holdCode(1, true)]]] },
    ]);
    f.enqueue("pa", "v:3", presence.add("pa", "v:3", true));
    await clock.advance(BATCH_MS - 1);
    expect(owners.sent).toHaveLength(1);
    await clock.advance(1);
    expect(owners.sent[1]!.request).toMatchObject({ pages: [["pa", ["v:3", holdCode(1, true)]]] });
    f.close();
  });

  test("gateway - ops and syncs tell the owner each viewer's sockets and attention, defaults left out", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence);
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", true));
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", false));
    f.enqueue("page-a", "v:2", presence.add("page-a", "v:2", false));
    await eventually(() => expect(owners.sent).toHaveLength(1));
    // Latest state per viewer: v:1 on two sockets (one visible), v:2 on one hidden socket.
    expect(owners.sent[0]!.request).toEqual({
      type: "presence_pages",
      gateway: "gw-1",
      partition: partitionOf("page-a", PARTITIONS),
      pages: [["page-a", ["v:1", holdCode(2, true), "v:2", holdCode(1, false)]]],
    });
    // The visible socket of v:1 goes to the background: v:1 is no longer active here.
    expect(presence.setActive("page-a", "v:1", false)).toEqual({ sockets: 2, active: false });
    // v:2's only socket comes to the front and goes back.
    expect(presence.setActive("page-a", "v:2", true)).toEqual({ sockets: 1, active: true });
    expect(presence.setActive("page-a", "v:2", false)).toEqual({ sockets: 1, active: false });
    f.resyncAll();
    await eventually(() => expect(owners.sent).toHaveLength(2));
    expect(owners.sent[1]!.request).toEqual({
      type: "presence_sync",
      gateway: "gw-1",
      partition: owners.sent[1]!.request.type === "presence_sync" ? owners.sent[1]!.request.partition : -1,
      pages: { "page-a": ["v:1", "v:2"] },
      sockets: { "page-a": [2, 1] },
      passive: { "page-a": ["v:1", "v:2"] },
    });
    f.close();
  });

  test("gateway - local presence reports a change of attention only when the viewer's own changes", () => {
    const presence = new LocalPresence();
    presence.add("p", "v:1", false);
    presence.add("p", "v:1", false);
    expect(presence.setActive("p", "v:1", true)).toEqual({ sockets: 2, active: true });
    // A second socket coming to the front: the viewer was active already.
    expect(presence.setActive("p", "v:1", true)).toBeUndefined();
    expect(presence.setActive("p", "v:1", false)).toBeUndefined();
    expect(presence.remove("p", "v:1", true)).toEqual({ sockets: 1, active: false });
    expect(presence.remove("p", "v:1", false)).toBeUndefined();
    expect(presence.has("p", "v:1")).toBe(false);
    expect(presence.setActive("p", "v:1", true)).toBeUndefined();
  });

  test("gateway - an owner of an earlier release gets the same transitions as presence ops, until the owner changes", async () => {
    const owners = new Owners();
    owners.earlier.add("old");
    const presence = new LocalPresence();
    const f = forwarder(owners, presence);
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", true));
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", false));
    f.enqueue("page-a", "v:2", presence.add("page-a", "v:2", false));
    f.enqueue("page-a", "v:3", undefined, true);
    await eventually(() => expect(owners.sent).toHaveLength(2));
    expect(owners.sent.map((s) => s.request.type)).toEqual(["presence_pages", "presence"]);
    const partition = partitionOf("page-a", PARTITIONS);
    expect(owners.sent[1]!.request).toEqual({
      type: "presence",
      gateway: "gw-1",
      partition,
      ops: [
        { page: "page-a", viewer: "v:1", present: true, sockets: 2 },
        { page: "page-a", viewer: "v:2", present: true, active: false },
        { page: "page-a", viewer: "v:3", present: false, drop: true },
      ],
    });
    // Known to be of an earlier release: the next batch is sent as it takes it, at once.
    f.enqueue("page-a", "v:2", presence.remove("page-a", "v:2", false));
    await eventually(() => expect(owners.sent).toHaveLength(3));
    expect(owners.sent[2]!.request).toMatchObject({
      type: "presence",
      ops: [{ page: "page-a", viewer: "v:2", present: false }],
    });
    // A new owner (of this release) gets this release's batches again, after its sync.
    moveToNew(f, owners);
    await eventually(() => expect(owners.sent).toHaveLength(4));
    expect(owners.sent[3]!.request.type).toBe("presence_sync");
    f.enqueue("page-a", "v:4", presence.add("page-a", "v:4", true));
    await eventually(() => expect(owners.sent).toHaveLength(5));
    expect(owners.sent[4]!.request).toEqual({
      type: "presence_pages",
      gateway: "gw-1",
      partition,
      pages: [["page-a", ["v:4", holdCode(1, true)]]],
    });
    f.close();
  });

  test("gateway - a sync refused by a new owner not serving yet goes again at once when it says it serves the partition, not after its backoff", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    // A backoff far longer than the test: only ownerServing can send the sync again in time.
    const f = forwarder(owners, presence, 60_000);
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", true));
    await eventually(() => expect(f.idle).toBe(true));
    owners.refusing.add("new");
    moveToNew(f, owners);
    const partition = partitionOf("page-a", PARTITIONS);
    await eventually(() => expect(owners.sent.filter((s) => s.owner === "new")).toHaveLength(1));
    await new Promise((resolve) => setTimeout(resolve, 20));
    // Another partition's notice changes nothing.
    f.ownerServing((partition + 1) % PARTITIONS);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(owners.sent.filter((s) => s.owner === "new")).toHaveLength(1);
    owners.refusing.delete("new");
    f.ownerServing(partition);
    await eventually(() => expect(f.idle).toBe(true), { timeoutMs: 2000 });
    const sent = owners.sent.filter((s) => s.owner === "new").map((s) => s.request.type);
    expect(sent).toEqual(["presence_sync", "presence_sync"]);
    f.close();
  });

  test("gateway - a failed batch goes again with what was queued meanwhile, the newer state of a viewer winning", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence, 30);
    const answer = deferred<NodeReply>();
    owners.next = answer.promise;
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", true));
    f.enqueue("page-a", "v:2", presence.add("page-a", "v:2", true));
    await eventually(() => expect(owners.sent).toHaveLength(1));
    // While the batch is in flight: v:2 is dropped, a new viewer joins; then the batch fails.
    f.enqueue("page-a", "v:2", presence.remove("page-a", "v:2", true), true);
    f.enqueue("page-a", "v:3", presence.add("page-a", "v:3", true));
    answer.reject(new ProtocolError("unavailable"));
    await eventually(() => expect(owners.sent).toHaveLength(2), { timeoutMs: 2000 });
    const retried = owners.sent[1]!.request;
    const pages = retried.type === "presence_pages" ? retried.pages : [];
    expect(pages.map(([page]) => page)).toEqual(["page-a"]);
    const transitions = new Map<unknown, unknown>();
    const flat = pages[0]![1];
    for (let i = 0; i < flat.length; i += 2) transitions.set(flat[i], flat[i + 1]);
    // v:2's drop, queued after the failed batch took its join, wins over it.
    expect(transitions).toEqual(
      new Map<unknown, unknown>([
        ["v:2", HOLD_DROPPED],
        ["v:3", holdCode(1, true)],
        ["v:1", holdCode(1, true)],
      ]),
    );
    await eventually(() => expect(f.idle).toBe(true));
    f.close();
  });

  test("gateway - a batch refused by an earlier owner after a sync superseded it is not sent again to the new owner", async () => {
    const owners = new Owners();
    owners.earlier.add("old");
    const presence = new LocalPresence();
    const f = forwarder(owners, presence);
    const refusal = deferred<NodeReply>();
    owners.next = refusal.promise;
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", true));
    await eventually(() => expect(owners.sent).toHaveLength(1));
    // v:1 leaves and the partition moves to an owner of this release before the old one answers.
    f.enqueue("page-a", "v:1", presence.remove("page-a", "v:1", true));
    f.enqueue("page-a", "v:0", presence.add("page-a", "v:0", true));
    moveToNew(f, owners);
    await eventually(() => expect(owners.sent).toHaveLength(2));
    expect(owners.sent[1]).toMatchObject({
      owner: "new",
      request: { type: "presence_sync", pages: { "page-a": ["v:0"] } },
    });
    refusal.reject(UNKNOWN_TYPE);
    // v:1's join is history: nothing brings it to the new owner, which is not taken for an earlier release.
    f.enqueue("page-a", "v:4", presence.add("page-a", "v:4", true));
    await eventually(() => expect(owners.sent).toHaveLength(3));
    expect(owners.sent[2]!.request).toMatchObject({
      type: "presence_pages",
      pages: [["page-a", ["v:4", holdCode(1, true)]]],
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(owners.sent).toHaveLength(3);
    f.close();
  });

  test("gateway - a bad_frame other than an unknown type is retried in this release's form, not sent as presence ops", async () => {
    const owners = new Owners();
    const presence = new LocalPresence();
    const f = forwarder(owners, presence, 30);
    const refusal = Promise.reject(new ProtocolError("bad_frame", 'page "page-a" is not in partition 3'));
    refusal.catch(() => {}); // handled by the forwarder once it asks
    owners.next = refusal;
    f.enqueue("page-a", "v:1", presence.add("page-a", "v:1", true));
    await eventually(() => expect(owners.sent).toHaveLength(2), { timeoutMs: 2000 });
    expect(owners.sent.map((s) => s.request.type)).toEqual(["presence_pages", "presence_pages"]);
    f.close();
  });
});
