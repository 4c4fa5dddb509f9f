import {
  MAX_INCREMENT_BATCH,
  ProtocolError,
  type IncrementReply,
  type IncrementRequest,
} from "@livecount/protocol";
import type { Clock } from "@livecount/runtime";
import type { GatewayMetrics } from "./gateway_metrics.js";
import type { OwnerClient } from "./owner_client.js";

interface Pending {
  readonly request: IncrementRequest;
  readonly resolve: (reply: IncrementReply) => void;
  readonly reject: (err: ProtocolError) => void;
}

/**
 * Publisher increments on their way to the pages' owners, batched: every increment asked for in
 * one turn of the event loop (the requests of one socket read, of every connection) goes to its
 * owner in one bus request, `increments`, of at most MAX_INCREMENT_BATCH items. The owner handles
 * each item as its own request and answers each on its own, so one item's error is that item's
 * only; a bus failure (timeout, no owner) fails the request's items alike, each as it would have
 * failed alone. A lone increment goes as a plain `increment`, and so does every increment of a
 * batch an owner of an earlier release refuses as unknown.
 */
export class IncrementBatcher {
  readonly #owners: OwnerClient;
  readonly #clock: Clock;
  readonly #metrics: GatewayMetrics;
  /** owner node -> increments waiting for the end of the turn. */
  #queued = new Map<string, Pending[]>();
  #scheduled = false;

  constructor(owners: OwnerClient, clock: Clock, metrics: GatewayMetrics) {
    this.#owners = owners;
    this.#clock = clock;
    this.#metrics = metrics;
  }

  /** Resolves with the owner's answer; rejects with ProtocolError (its stable code). */
  increment(request: IncrementRequest): Promise<IncrementReply> {
    const owner = this.#owners.ownerOfPage(request.page);
    return new Promise((resolve, reject) => {
      let queue = this.#queued.get(owner);
      if (queue === undefined) this.#queued.set(owner, (queue = []));
      queue.push({ request, resolve, reject });
      if (this.#scheduled) return;
      this.#scheduled = true;
      this.#clock.defer(() => this.#flush());
    });
  }

  #flush(): void {
    const queued = this.#queued;
    this.#queued = new Map();
    this.#scheduled = false;
    for (const [owner, pending] of queued) {
      for (let i = 0; i < pending.length; i += MAX_INCREMENT_BATCH)
        void this.#send(owner, pending.slice(i, i + MAX_INCREMENT_BATCH));
    }
  }

  async #send(owner: string, batch: readonly Pending[]): Promise<void> {
    if (batch.length === 1) return this.#sendOne(owner, batch[0]!);
    this.#metrics.incrementRequests.inc();
    this.#metrics.incrementsSent.inc(batch.length);
    let replies;
    try {
      const items = batch.map((p) => p.request);
      replies = (await this.#owners.toNode(owner, { type: "increments", items })).replies;
    } catch (err) {
      const e = asProtocolError(err);
      // An owner of an earlier release does not know the batch (bad_frame): each goes on its own.
      if (e.code === "bad_frame") await Promise.all(batch.map((p) => this.#sendOne(owner, p)));
      else for (const p of batch) p.reject(e);
      return;
    }
    batch.forEach((p, i) => {
      const reply = replies[i];
      if (reply === undefined)
        p.reject(new ProtocolError("internal", "the owner left an increment unanswered"));
      else if (reply.type === "error") p.reject(new ProtocolError(reply.code, reply.message));
      else p.resolve(reply);
    });
  }

  async #sendOne(owner: string, pending: Pending): Promise<void> {
    this.#metrics.incrementRequests.inc();
    this.#metrics.incrementsSent.inc();
    try {
      pending.resolve(await this.#owners.toNode(owner, pending.request));
    } catch (err) {
      pending.reject(asProtocolError(err));
    }
  }
}

function asProtocolError(err: unknown): ProtocolError {
  return err instanceof ProtocolError ? err : new ProtocolError("internal", undefined, { cause: err });
}
