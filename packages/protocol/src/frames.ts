/** Protocol v1 frames. Text frames carry JSON, binary frames carry msgpack of the same shapes. */
import { ERROR_CODES, ProtocolError, type ErrorCode } from "./errors.js";

/**
 * `token` (join and watch): an HS256 JWT for a private page (LIVECOUNT_PRIVATE_PREFIXES), signed
 * with LIVECOUNT_JOIN_SECRET, with claims `page` or `prefix`, `sub` (the viewer id counted; a
 * `viewer` field is then ignored) and `exp`.
 *
 * `active` (join, and the `active` frame): whether the socket's page is in front of its viewer (a
 * visible tab). A viewer is active while any of its sockets on the page is. A join without it is
 * active.
 */
export type ClientFrame =
  | {
      readonly type: "join";
      readonly page: string;
      readonly viewer?: string;
      readonly token?: string;
      readonly active?: boolean;
    }
  /** Without `page`: every page the socket joined (a tab hidden or shown says it once). */
  | { readonly type: "active"; readonly page?: string; readonly active: boolean }
  | { readonly type: "leave"; readonly page: string }
  | { readonly type: "watch"; readonly page: string; readonly token?: string }
  | { readonly type: "unwatch"; readonly page: string }
  | { readonly type: "ping" };

export type ClientFrameType = ClientFrame["type"];

/** A page's value, as a `count` frame and each page of a `counts` frame carry it. */
export interface PageValue {
  /** Distinct viewers with an open socket on the page, summed over live data centers. */
  readonly viewers: number;
  /** Of those, the viewers with at least one active socket on the page (a visible tab). */
  readonly active?: number;
  /** Open sockets joined to the page, summed over live data centers. */
  readonly connections?: number;
  /** Durable counters of the page by name (likes, reactions, ...). */
  readonly counters: Readonly<Record<string, number>>;
  /** Data centers whose entries make up the value (live ones; a partitioned DC's viewers drop out). */
  readonly dcs?: readonly string[];
  /** How stale the oldest contributing data center's entries may be, in ms (0 with one DC). */
  readonly lag_ms?: number;
}

export interface CountFrame extends PageValue {
  readonly type: "count";
  readonly page: string;
  /** Milliseconds since the epoch when this value was computed. */
  readonly ts: number;
}

/**
 * Every page of a socket whose value changed in one coalescing window, in one frame: what a socket
 * that negotiated {@link COUNTS_SUBPROTOCOL} gets instead of `count` frames.
 */
export interface CountsFrame {
  readonly type: "counts";
  /** Milliseconds since the epoch when these values were computed. */
  readonly ts: number;
  /** Page id -> its value, exactly what a `count` frame of the page would carry. */
  readonly pages: Readonly<Record<string, PageValue>>;
}

/**
 * The WebSocket subprotocol (`Sec-WebSocket-Protocol`) a client offers on the upgrade to `/ws` to get
 * `counts` frames instead of `count` frames. A gateway that takes it names it in its answer.
 */
export const COUNTS_SUBPROTOCOL = "livecount.counts";

/** Whether a `Sec-WebSocket-Protocol` request header (a comma-separated list) offers `livecount.counts`. */
export function offersCounts(header: string): boolean {
  return header.split(",").some((p) => p.trim() === COUNTS_SUBPROTOCOL);
}

/**
 * The `Sec-WebSocket-Protocol` a gateway answers to an offer (RFC 6455 4.2.2: one of the values
 * offered, or none): `livecount.counts` when offered, else the first value offered (what gateways
 * before `counts` frames answered too), else "" (no header).
 */
export function answeredSubprotocol(offer: string): string {
  if (offersCounts(offer)) return COUNTS_SUBPROTOCOL;
  for (const value of offer.split(",")) if (value.trim() !== "") return value.trim();
  return "";
}

export interface ErrorFrame {
  readonly type: "error";
  readonly code: string;
  readonly message: string;
  /** The page the failed request named, when it named one. */
  readonly page?: string;
}

export interface PongFrame {
  readonly type: "pong";
}

export type ServerFrame = CountFrame | CountsFrame | ErrorFrame | PongFrame;

export type Encoding = "json" | "msgpack";

/** An error frame for `code`, with the code's standard message unless one is given. */
export function errorFrame(
  code: ErrorCode,
  message: string = ERROR_CODES[code].message,
  page?: string,
): ErrorFrame {
  return page === undefined ? { type: "error", code, message } : { type: "error", code, message, page };
}

/**
 * The error frame answering a failed client request: a ProtocolError keeps its code and message;
 * anything else becomes `internal` with the standard message, so no internals leak to clients.
 */
export function errorFrameOf(err: unknown, page?: string): ErrorFrame {
  return err instanceof ProtocolError
    ? errorFrame(err.code, err.message, page ?? err.page)
    : errorFrame("internal", undefined, page);
}
