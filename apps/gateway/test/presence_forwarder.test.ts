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
});
