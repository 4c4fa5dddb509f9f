/**
 * `GET /v1/pages/{page}/counters/{counter}/window`: the sum of a counter's changes over the last
 * seconds asked for, from its window buckets in this DC's store (every DC's, as replicated here). The
 * DCs to look for are those with an entry of the counter: a bucket is written with its counter's
 * entry, in one atomic step, and travels with it.
 */
import {
  ProtocolError,
  windowCounterOf,
  windowMinutes,
  type NodeReply,
  type WindowRequest,
} from "@livecount/protocol";
import { StoreError, type Store } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";

export async function readWindow(
  registry: ActorRegistry,
  store: Store,
  request: WindowRequest,
  partition: number,
): Promise<NodeReply> {
  const { page, counter, seconds } = request;
  // A read: it brings no page into memory (a made-up page id costs nothing).
  const record = await registry.read(page, partition);
  const dcs = Object.hasOwn(record, counter) ? Object.keys(record[counter]!) : [];
  const now = registry.now();
  const { from, to } = windowMinutes(now, seconds);
  const refs: Array<{ counter: string; dc: string }> = [];
  for (let minute = from; minute <= to; minute++)
    for (const dc of dcs) refs.push({ counter: windowCounterOf(counter, minute), dc });
  let entries;
  try {
    entries = await store.loadEntries(page, refs);
  } catch (err) {
    if (err instanceof StoreError) throw new ProtocolError("unavailable", "the store did not answer; retry");
    throw err;
  }
  let value = 0;
  for (const e of entries) if (e !== undefined) value += e.p - e.n;
  return { type: "window_total", page, counter, seconds, value, ts: now };
}
