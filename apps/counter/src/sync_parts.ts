import { pageRecordFrom, type PresenceSync, type PresenceSyncPart } from "@livecount/protocol";

/**
 * How long a resync being gathered waits for its next part: a gateway sends them back to back, each
 * within its request timeout (LIVECOUNT_REQUEST_TIMEOUT_MS, 3 s by default), so a minute is one
 * that will not come.
 */
export const STALE_MS = 60_000;

/** One resync being gathered: each page's viewers and socket counts, in the order they came. */
interface Gathered {
  readonly gateway: string;
  readonly partition: number;
  readonly parts: number;
  /** The part expected next. */
  next: number;
  /** When its last part came (monotonic ms). */
  at: number;
  reconnects: number | undefined;
  readonly viewers: Map<string, string[]>;
  readonly sockets: Map<string, number[]>;
  readonly passive: Map<string, string[]>;
  readonly unvisited: Map<string, string[]>;
}

/**
 * The parts of gateways' resyncs too large for one message (PresenceSyncPart), gathered until the
 * last, so the owner applies them as the one sync they make. Applied one by one, each part would
 * replace what the gateway held: the viewers of the parts after it would be released in between
 * (with no grace window they end; with one, their sockets stop counting until they come back).
 */
export class SyncParts {
  /** Per gateway and partition: at most one resync at a time, the latest begun. */
  readonly #gathering = new Map<string, Gathered>();
  readonly #now: () => number;

  /** `now`: the process's monotonic clock, in ms. */
  constructor(now: () => number) {
    this.#now = now;
  }

  /**
   * Adds a part. The whole sync once it was the last; undefined while more are to come; "missing"
   * when it does not follow the part before (one failed, or a new resync began meanwhile): what was
   * gathered goes, and the gateway resyncs from the first part.
   */
  add(part: PresenceSyncPart): PresenceSync | undefined | "missing" {
    const now = this.#now();
    this.#dropStale(now);
    const key = `${part.gateway}\u0000${part.partition}`;
    let gathered = this.#gathering.get(key);
    if (part.part === 0) {
      gathered = {
        gateway: part.gateway,
        partition: part.partition,
        parts: part.parts,
        next: 0,
        at: now,
        reconnects: undefined,
        viewers: new Map(),
        sockets: new Map(),
        passive: new Map(),
        unvisited: new Map(),
      };
      this.#gathering.set(key, gathered);
    } else if (gathered?.next !== part.part || gathered.parts !== part.parts) {
      this.#gathering.delete(key);
      return "missing";
    }
    gather(gathered, part);
    gathered.next++;
    gathered.at = now;
    if (gathered.next < gathered.parts) return undefined;
    this.#gathering.delete(key);
    return syncOf(gathered);
  }

  /** The gateway's lease ended, or it resynced the partition whole: what it gathered goes. */
  forget(gateway: string, partition?: number): void {
    for (const [key, gathered] of this.#gathering)
      if (gathered.gateway === gateway && (partition === undefined || gathered.partition === partition))
        this.#gathering.delete(key);
  }

  /**
   * Drops resyncs whose next part has not come for STALE_MS: one the gateway gave up (its owner
   * changed, or the partition left this node) would otherwise stay until the gateway's lease ends,
   * which a live gateway's never does.
   */
  #dropStale(now: number): void {
    for (const [key, gathered] of this.#gathering)
      if (now - gathered.at > STALE_MS) this.#gathering.delete(key);
  }

  /** Resyncs being gathered (diagnostics and tests). */
  get size(): number {
    return this.#gathering.size;
  }
}

function gather(into: Gathered, part: PresenceSyncPart): void {
  into.reconnects = part.reconnects;
  for (const page of Object.keys(part.pages)) {
    const viewers = part.pages[page]!;
    const sockets =
      part.sockets !== undefined && Object.hasOwn(part.sockets, page) ? part.sockets[page] : undefined;
    append(into.viewers, page, viewers);
    append(
      into.sockets,
      page,
      viewers.map((_, i) => sockets?.[i] ?? 1),
    );
  }
  for (const [field, target] of [
    [part.passive, into.passive],
    [part.unvisited, into.unvisited],
  ] as const)
    for (const page of Object.keys(field ?? {})) append(target, page, field![page]!);
}

function append<T>(map: Map<string, T[]>, page: string, items: readonly T[]): void {
  const list = map.get(page);
  if (list === undefined) map.set(page, [...items]);
  else for (const item of items) list.push(item);
}

/** The sync the parts make: only what differs from the defaults, as one PresenceSync. */
function syncOf(g: Gathered): PresenceSync {
  const sockets = [...g.sockets].filter(([, counts]) => counts.some((n) => n !== 1));
  return {
    type: "presence_sync",
    gateway: g.gateway,
    partition: g.partition,
    pages: pageRecordFrom(g.viewers),
    ...(sockets.length > 0 ? { sockets: pageRecordFrom(sockets) } : {}),
    ...(g.passive.size > 0 ? { passive: pageRecordFrom(g.passive) } : {}),
    ...(g.unvisited.size > 0 ? { unvisited: pageRecordFrom(g.unvisited) } : {}),
    ...(g.reconnects !== undefined ? { reconnects: g.reconnects } : {}),
  };
}
