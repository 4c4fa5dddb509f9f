/** What the SDK's calls return. Times are milliseconds since the epoch. */

/** A page's live state (`GET /v1/pages/{page}/counter`). */
export interface PageCounters {
  readonly page: string;
  /** Distinct viewers with an open socket on the page, over every live gateway and data center. */
  readonly viewers: number;
  /** Of those, viewers with the page in front of them (a visible tab); absent from older servers. */
  readonly active?: number;
  /** Open sockets joined to the page; absent from older servers. */
  readonly connections?: number;
  /** Durable counters by name (likes, reactions, unread, ...). A counter never changed is absent. */
  readonly counters: Readonly<Record<string, number>>;
  readonly updatedAt: number;
  /** The data centers whose entries make up the values; absent from older servers. */
  readonly dcs?: readonly string[];
  /**
   * How stale the stalest of those data centers may be, in ms (0 with one data center): show the
   * values as approximate while it grows (a partition). Absent from older servers.
   */
  readonly lagMs?: number;
}

/** A page's viewers now, its peaks and its unique visitors (`LivecountClient.stats`). */
export interface PageStats {
  readonly page: string;
  readonly viewers: number;
  readonly active: number;
  readonly connections: number;
  /** The most viewers the answering data center showed in the last hour and the last day. */
  readonly peakViewers: { readonly "1h": number; readonly "24h": number };
  /** Distinct viewers of the current and previous UTC day over every data center (estimated, 1.6%). */
  readonly uniqueVisitors: { readonly "24h": number };
  readonly updatedAt: number;
}

/** A counter's changes over a window of time (`LivecountClient.window`). */
export interface WindowValue {
  readonly page: string;
  readonly counter: string;
  /** The window, in seconds. */
  readonly seconds: number;
  /** The sum of the counter's changes in it (negative when decrements outweigh increments). */
  readonly value: number;
  readonly updatedAt: number;
}

/** The answer to a change of one counter. */
export interface CounterValue {
  readonly page: string;
  readonly counter: string;
  /** The counter's value right after the change, over all data centers. */
  readonly value: number;
  readonly updatedAt: number;
  /**
   * True when the server had already applied this idempotency key: this is the original answer
   * and nothing was counted again (a retry after a lost response, typically).
   */
  readonly replayed: boolean;
}

/** The answer to a reset or a delete: the counter is 0 right after it. */
export interface ResetValue extends CounterValue {
  /** The value the reset cancelled, as the page's owner saw it. */
  readonly previous: number;
}

/** One item of `LivecountClient.incrementMany`. */
export interface IncrementItem {
  readonly page: string;
  readonly counter: string;
  /** Signed change, a non-zero integer: positive increments, negative decrements. */
  readonly change: number;
  /** Idempotency key of this item; generated when absent. */
  readonly id?: string;
}

/** One data center's entry of a PN-counter: increments `p` and decrements `n`, each only ever growing. */
export interface RawEntry {
  readonly p: number;
  readonly n: number;
}

/** A page's raw PN-counter entries by data center (`GET /v1/counters?raw=true`). */
export interface RawPage {
  readonly page: string;
  /** Presence entries of the live data centers; their `p - n` sum is `viewers`. */
  readonly viewers: Readonly<Record<string, RawEntry>>;
  /** Per counter, per data center; each counter's `p - n` sum is its value. */
  readonly counters: Readonly<Record<string, Readonly<Record<string, RawEntry>>>>;
  readonly updatedAt: number;
}

/** One page of a prefix listing. */
export interface PageListing {
  /** Pages with their values, in byte order of their ids. */
  readonly pages: readonly PageCounters[];
  /** Pass to the next `list()` call to continue; undefined after the last page. */
  readonly cursor: string | undefined;
}

/** A live value pushed over the WebSocket (a protocol v1 `count` frame). */
export interface CountUpdate {
  readonly page: string;
  readonly viewers: number;
  /** Viewers with the page in front of them (a visible tab); absent from older servers. */
  readonly active?: number;
  /** Open sockets joined to the page; absent from older servers. */
  readonly connections?: number;
  readonly counters: Readonly<Record<string, number>>;
  /** When the server computed this value. */
  readonly ts: number;
  /** The data centers whose entries make up the values; absent from older servers. */
  readonly dcs?: readonly string[];
  /** How stale the stalest of them may be, in ms (0 with one data center); absent from older servers. */
  readonly lagMs?: number;
}
