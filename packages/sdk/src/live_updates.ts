/**
 * What both transports of `subscribe()` share (the WebSocket, subscriptions.ts, and event streams,
 * event_streams.ts): reading a count frame, and handing updates and errors to the subscriptions.
 */
import { LivecountError } from "./errors.js";
import type { CountListener } from "./subscriptions.js";
import type { CountUpdate } from "./types.js";

/** A server frame as JSON text, if it is a JSON object; its fields are checked by whoever reads them. */
export function parseFrame(text: string): Record<string, unknown> | undefined {
  let frame: unknown;
  try {
    frame = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof frame === "object" && frame !== null ? (frame as Record<string, unknown>) : undefined;
}

/** A count frame's update, if `f` is a well-formed one (fields it does not know are dropped). */
export function countUpdate(f: Record<string, unknown>): CountUpdate | undefined {
  const { page, viewers, counters, ts } = f;
  if (typeof page !== "string" || !Number.isSafeInteger(viewers) || !Number.isSafeInteger(ts))
    return undefined;
  if (typeof counters !== "object" || counters === null || Array.isArray(counters)) return undefined;
  const entries = Object.entries(counters).filter((e): e is [string, number] => Number.isSafeInteger(e[1]));
  const { active, connections, dcs, lag_ms: lagMs } = f;
  return {
    page,
    viewers: viewers as number,
    ...(Number.isSafeInteger(active) ? { active: active as number } : {}),
    ...(Number.isSafeInteger(connections) ? { connections: connections as number } : {}),
    counters: Object.fromEntries(entries),
    ts: ts as number,
    ...(Array.isArray(dcs) && dcs.every((dc) => typeof dc === "string") ? { dcs: dcs as string[] } : {}),
    ...(Number.isSafeInteger(lagMs) ? { lagMs: lagMs as number } : {}),
  };
}

/**
 * The updates of a counts frame (`{"type":"counts","ts","pages":{page: value}}`), one per
 * well-formed page value, each read like a count frame of that page.
 */
export function countsUpdates(f: Record<string, unknown>): CountUpdate[] {
  const { pages, ts } = f;
  if (typeof pages !== "object" || pages === null || Array.isArray(pages)) return [];
  const out: CountUpdate[] = [];
  for (const [page, value] of Object.entries(pages)) {
    if (typeof value !== "object" || value === null) continue;
    const update = countUpdate({ ...(value as Record<string, unknown>), page, ts });
    if (update !== undefined) out.push(update);
  }
  return out;
}

/** Calls a subscription's listener; one that throws is reported, never thrown into the connection. */
export function notify(
  listener: CountListener,
  update: CountUpdate,
  report: (error: LivecountError) => void,
): void {
  try {
    listener(update);
  } catch (err) {
    report(
      new LivecountError("listener_error", "a subscribe() listener threw", { cause: err, retryable: false }),
    );
  }
}

/** An error about a page goes to its subscriptions' `onError` handlers (each once), or to `report` when none has one. */
export function reportToPage(
  subs: Iterable<{ readonly onError: ((error: LivecountError) => void) | undefined }>,
  error: LivecountError,
  report: (error: LivecountError) => void,
): void {
  const handlers = new Set([...subs].map((s) => s.onError).filter((h) => h !== undefined));
  if (handlers.size > 0) for (const h of handlers) safely(() => h(error));
  else report(error);
}

export function safely(fn: () => void): void {
  try {
    fn();
  } catch {
    // An error handler that throws has nowhere else to go.
  }
}
