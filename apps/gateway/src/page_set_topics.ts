import {
  encodeCountsEntry,
  spliceCountsFrame,
  type CountFrame,
  type CountsEntry,
  type Encoding,
} from "@livecount/protocol";

/**
 * The pages a socket that negotiated `counts` frames watches in one encoding, shared by every such
 * socket watching exactly these pages in that encoding: they all get the same frame each window,
 * published once to the set's uWS topic (uWS copies it to each subscriber in native code).
 */
export interface PageSet {
  /** The encoding and the pages: what names the set among others. */
  readonly key: string;
  readonly topic: string;
  readonly encoding: Encoding;
  /** Sorted page ids. */
  readonly pages: readonly string[];
  /** Sockets in the set; the set is forgotten when the last one leaves. */
  sockets: number;
}

/** What a socket offers for topics (uWS's WebSocket). */
export interface TopicSubscriber {
  subscribe(topic: string): unknown;
  unsubscribe(topic: string): unknown;
}

/** Where a publish sends each frame: uWS's app.publish (a binary frame for msgpack). */
export type TopicPublisher = (topic: string, frame: string | Uint8Array, isBinary: boolean) => void;

/**
 * The page sets of `counts` sockets. A socket belongs to one set per encoding it watches pages in
 * (`enter` it with its pages after each join, watch, leave or unwatch, `leave` the previous one), so
 * one publish per window sends every socket one frame per encoding with all its changed pages.
 * Widgets of one web page share a socket, and the readers of one article share its widget set, so
 * sets are few and large; in the worst case (every socket a set of its own) a publish costs one
 * frame per socket, what a per-socket send would.
 */
export class PageSetTopics {
  readonly #sets = new Map<string, PageSet>();
  readonly #byPage = new Map<string, Set<PageSet>>();
  #nextId = 1;

  /** Page sets held by at least one socket. */
  get size(): number {
    return this.#sets.size;
  }

  /** Adds a socket to the set of `pages` (sorted, at least one) in `encoding`, made on first use. */
  enter(pages: readonly string[], encoding: Encoding): PageSet {
    // Page ids hold no spaces (printable ASCII from 0x21), so the key names one list.
    const key = `${encoding} ${pages.join(" ")}`;
    let set = this.#sets.get(key);
    if (set === undefined) {
      set = { key, topic: `c:${this.#nextId++}`, encoding, pages, sockets: 0 };
      this.#sets.set(key, set);
      for (const page of pages) {
        let sets = this.#byPage.get(page);
        if (sets === undefined) this.#byPage.set(page, (sets = new Set()));
        sets.add(set);
      }
    }
    set.sockets++;
    return set;
  }

  /**
   * Moves a socket from `previous` (its set in `encoding`, if any) to the set of `pages` (its pages
   * in that encoding now, in any order; none: no set), subscribing it to the new set's topic and
   * unsubscribing it from the old one. Returns its set now.
   */
  move(
    socket: TopicSubscriber,
    previous: PageSet | undefined,
    pages: string[],
    encoding: Encoding,
  ): PageSet | undefined {
    const next = pages.length > 0 ? this.enter(pages.sort(), encoding) : undefined;
    if (next === previous) {
      if (next !== undefined) this.leave(next);
      return next;
    }
    if (next !== undefined) socket.subscribe(next.topic);
    if (previous !== undefined) {
      socket.unsubscribe(previous.topic);
      this.leave(previous);
    }
    return next;
  }

  /** A socket is no longer in `set` (it changed pages, or closed). */
  leave(set: PageSet): void {
    if (--set.sockets > 0) return;
    this.#sets.delete(set.key);
    for (const page of set.pages) {
      const sets = this.#byPage.get(page);
      sets?.delete(set);
      if (sets?.size === 0) this.#byPage.delete(page);
    }
  }

  /**
   * Publishes one counts frame of `ts` to each set with a page among `frames` (one window's changed
   * values), carrying its pages among them. Each page is encoded once per encoding. Returns how many
   * frames were published.
   */
  publish(ts: number, frames: readonly CountFrame[], send: TopicPublisher): number {
    const touched = new Map<PageSet, CountsEntry[]>();
    for (const frame of frames) {
      const sets = this.#byPage.get(frame.page);
      if (sets === undefined) continue;
      let json: CountsEntry | undefined;
      let msgpack: CountsEntry | undefined;
      for (const set of sets) {
        const entry =
          set.encoding === "json"
            ? (json ??= encodeCountsEntry(frame, "json"))
            : (msgpack ??= encodeCountsEntry(frame, "msgpack"));
        const entries = touched.get(set);
        if (entries === undefined) touched.set(set, [entry]);
        else entries.push(entry);
      }
    }
    for (const [set, entries] of touched)
      send(set.topic, spliceCountsFrame(ts, entries, set.encoding), set.encoding === "msgpack");
    return touched.size;
  }
}
