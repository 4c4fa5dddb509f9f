import type { Membership } from "@livecount/cluster";
import type { Clock } from "@livecount/runtime";

/**
 * Resolves once some counter node is on `membership`'s ring, after `waitMs`, or once `cancelled`
 * settles (the gateway stops while it starts): a gateway that takes sockets before it knows an owner
 * fails its first joins and retries them.
 */
export function ringKnown(
  membership: Membership,
  clock: Clock,
  waitMs: number,
  cancelled: Promise<unknown>,
): Promise<void> {
  if (waitMs <= 0 || membership.ring.nodes.length > 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      off();
      clock.clearTimeout(timer);
      resolve();
    };
    const timer = clock.setTimeout(done, waitMs);
    const off = membership.onChange((ring) => {
      if (ring.nodes.length > 0) done();
    });
    void cancelled.then(done, done);
  });
}

/** `start()` was cut short by `stop()` (superseded under its node id while it started). */
export class GatewayStoppedError extends Error {
  override name = "GatewayStoppedError";
  constructor() {
    super("the gateway was stopped while it started");
  }
}
