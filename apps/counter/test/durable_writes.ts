/**
 * What the durable writer's tests (durable_writer*.test.ts) share: a viewer joining a page, and the
 * check that nothing reaches the bus ahead of the store.
 */
import type { Units } from "./units.js";

/**
 * Every publish in the timeline follows a completed store call that wrote its page, with no other
 * store call started in between: nothing reaches the bus ahead of the store.
 */
export function publishesFollowDurableWrites(timeline: readonly string[]): void {
  let durable = new Set<string>();
  for (const event of timeline) {
    const done = /^(?:write|increment):done:(.*)$/.exec(event);
    if (done !== null) durable = new Set(done[1]!.split(","));
    else if (event.endsWith(":start") || event.endsWith(":failed")) durable = new Set();
    else if (event.startsWith("publish:") && !durable.has(event.slice("publish:".length)))
      throw new Error(`published ahead of the store: ${timeline.join(" ")}`);
  }
}

/** A gateway's presence batch: viewer v:1 joined `page` (in `partition`, 1 by default). */
export function joinOne(u: Units, page: string, partition = 1): Promise<unknown> {
  return u.intake.batch({
    type: "presence",
    gateway: "gw",
    partition,
    ops: [{ page, viewer: "v:1", present: true }],
  });
}
