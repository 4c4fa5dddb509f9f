import type { NodeReply, NodeRequest } from "@livecount/protocol";
import { HashRing } from "@livecount/ring";
import { silentLogger, systemClock } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { LocalPresence } from "../src/local_presence.js";
import type { OwnerClient } from "../src/owner_client.js";
import { PresenceForwarder } from "../src/presence_forwarder.js";

const PARTITIONS = 8;

/** Owners as the ring says; requests to a dead owner hang (the fault injected here). */
class Owners {
  owner = "old";
  readonly dead = new Set<string>();
  readonly sent: Array<{ owner: string; request: NodeRequest }> = [];

  request(_partition: number, request: NodeRequest): Promise<NodeReply> {
    const owner = this.owner;
    this.sent.push({ owner, request });
    if (this.dead.has(owner)) return new Promise(() => {});
    return Promise.resolve({ type: "ack" });
  }
}

function forwarder(owners: Owners, presence: LocalPresence): PresenceForwarder {
  return new PresenceForwarder({
    owners: owners as unknown as OwnerClient,
    presence,
    clock: systemClock,
    logger: silentLogger,
    gateway: "gw-1",
    partitions: PARTITIONS,
    batchMs: 1,
    retryMs: 10_000,
    maxRetryMs: 10_000,
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
    owners.owner = "new";
    f.enqueue("page-a", "v:2", presence.add("page-a", "v:2", true));
    f.onRingChange(
      new HashRing(["new"], { partitions: PARTITIONS }),
      new HashRing(["old"], { partitions: PARTITIONS }),
      new Set(),
    );
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
      type: "presence",
      ops: [{ page: "__proto__", viewer: "v:1", present: false }],
    });
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
    expect(owners.sent[0]!.request).toMatchObject({
      type: "presence",
      ops: [
        { page: "page-a", viewer: "v:1", present: true, sockets: 2 },
        { page: "page-a", viewer: "v:2", present: true, active: false },
      ],
    });
    const ops = (owners.sent[0]!.request as unknown as { ops: Array<Record<string, unknown>> }).ops;
    expect(ops[0]).not.toHaveProperty("active");
    expect(ops[1]).not.toHaveProperty("sockets");
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
});
