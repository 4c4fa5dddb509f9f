/** Protocol v1 frames. Text frames carry JSON, binary frames carry msgpack of the same shapes. */

export type ClientFrame =
  | { readonly type: "join"; readonly page: string; readonly viewer?: string }
  | { readonly type: "leave"; readonly page: string }
  | { readonly type: "watch"; readonly page: string }
  | { readonly type: "unwatch"; readonly page: string }
  | { readonly type: "ping" };

export type ClientFrameType = ClientFrame["type"];

export interface CountFrame {
  readonly type: "count";
  readonly page: string;
  /** Distinct viewers with an open socket on the page, summed over live data centers. */
  readonly viewers: number;
  /** Durable counters of the page by name (likes, reactions, ...). */
  readonly counters: Readonly<Record<string, number>>;
  /** Milliseconds since the epoch when this value was computed. */
  readonly ts: number;
}

export interface ErrorFrame {
  readonly type: "error";
  readonly code: string;
  readonly message: string;
  /** The page the failed request named, when it named one. */
  readonly page?: string;
}

export type ServerFrame = CountFrame | ErrorFrame | { readonly type: "pong" };

export type Encoding = "json" | "msgpack";
