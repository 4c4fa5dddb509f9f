/**
 * What the commit batch tests (commit_batches*.test.ts) share: page actors of partition 3 at a fixed
 * time, held under FENCE, and increments pending on them.
 */
import type { IncrementRequest, NodeReply } from "@livecount/protocol";
import type { Fence } from "@livecount/store";
import type { PendingIncrement } from "../src/increment_batch.js";
import { PageActor, type ActorHost } from "../src/page_actor.js";
import { VisitorHash } from "../src/visitor_hash.js";

export const NOW = 5_000;
export const FENCE: Fence = { partition: 3, node: "n1/1", epoch: 7 };
export const host: ActorHost = {
  dc: "dc1",
  graceMs: 0,
  visitorHash: new VisitorHash("test-visitor-key-0123"),
  now: () => NOW,
  monotonic: () => NOW,
  markDirty: () => {},
  wakeAt: () => {},
  presenceFloor: () => 0,
  presenceRaised: () => {},
  purgeFloor: () => purgeFloor,
};

/** The partition's purge floor the actors see; 0 but in the tests of a purged partition. */
let purgeFloor = 0;

/** Sets the purge floor the actors see. */
export function setPurgeFloor(floor: number): void {
  purgeFloor = floor;
}

/** An actor of `page` holding `likes` in this DC (dc1) and `remote` in dc2. */
export function actor(page = "p", likes = 0, remote = 0): PageActor {
  const a = new PageActor(host, page, 3, 0);
  const entries = {
    ...(likes > 0 ? { dc1: { p: likes, n: 0 } } : {}),
    ...(remote > 0 ? { dc2: { p: remote, n: 0 } } : {}),
  };
  a.loaded(likes > 0 || remote > 0 ? { likes: entries } : {});
  return a;
}

/** An increment of `a`'s page pending in a batch; its replies are collected in `replies`. */
export function pendingIncrement(
  a: PageActor,
  key: string,
  delta = 1,
  counter = "likes",
): PendingIncrement & { replies: NodeReply[] } {
  const replies: NodeReply[] = [];
  const request: IncrementRequest = { type: "increment", page: a.page, counter, delta, key };
  return { actor: a, request, resolve: (r) => replies.push(r), replies };
}

/** The wire message of idempotency_conflict. */
export const CONFLICT = "idempotency key was used for a different request";

export const fenceOf = (partition: number): Fence | undefined => (partition === 3 ? FENCE : undefined);
