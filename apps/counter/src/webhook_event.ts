/**
 * What a webhook request carries (docs/protocol.md, "Webhooks"): the event as JSON, and its
 * signature, computed once when the event is created so that every retry sends the same bytes.
 */
import { createHmac, randomUUID } from "node:crypto";
import type { Transition } from "./occupancy_rules.js";

/** A transition of one page's viewers, as its owner saw it. */
export type OccupancyEvent = Transition & {
  readonly page: string;
  /** The page's partition: deliveries wait while a new owner of it settles (WebhookSender.hold). */
  readonly partition: number;
  /** The page's viewers over live data centers right after the transition. */
  readonly viewers: number;
  /** When the owner saw the transition, in ms since the epoch. */
  readonly ts: number;
};

/** The body, in the order of docs/protocol.md; threshold fields only on `page.threshold`. */
export interface WebhookBody {
  readonly id: string;
  readonly type: Transition["type"];
  readonly page: string;
  readonly viewers: number;
  readonly threshold?: number;
  readonly direction?: "up" | "down";
  /** The data center whose owner sent it: a receiver fed by several tells their streams apart. */
  readonly dc: string;
  readonly ts: number;
}

export const SIGNATURE_HEADER = "x-livecount-signature";

/**
 * The body of an event, with a new id: random, made once when the event is created and kept with
 * it in the queue, so every retry carries it, and no other event (in any DC, from any owner, after
 * any failover) ever has it.
 */
export function webhookBody(event: OccupancyEvent, dc: string): string {
  const body: WebhookBody = {
    id: randomUUID(),
    type: event.type,
    page: event.page,
    viewers: event.viewers,
    ...(event.type === "page.threshold" ? { threshold: event.threshold, direction: event.direction } : {}),
    dc,
    ts: event.ts,
  };
  return JSON.stringify(body);
}

/** `X-Livecount-Signature`: `sha256=` and the hex HMAC-SHA256 of the raw body with the secret. */
export function signature(secret: string, body: string): string {
  return `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
}
