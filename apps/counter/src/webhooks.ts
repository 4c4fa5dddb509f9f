import type { DcLiveness } from "@livecount/cluster";
import type { Clock, Logger } from "@livecount/runtime";
import type { Registry } from "prom-client";
import { Occupancy } from "./occupancy.js";
import { OccupancyRules } from "./occupancy_rules.js";
import type { WebhookConfig } from "./webhook_config.js";
import { WebhookMetrics } from "./webhook_metrics.js";
import { WebhookSender } from "./webhook_sender.js";

export interface WebhooksOptions {
  readonly config: WebhookConfig;
  readonly dc: string;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly liveness: Pick<DcLiveness, "isLive" | "onChange">;
}

/**
 * Occupancy webhooks on a counter node: `Occupancy` watches the pages' levels for the actor
 * registry, `WebhookSender` delivers what it sees. A data center going down or coming back moves
 * the totals of the pages it has viewers on.
 */
export class Webhooks {
  readonly occupancy: Occupancy;
  readonly #sender: WebhookSender;
  readonly #stopListening: () => void;

  constructor(o: WebhooksOptions) {
    const logger = o.logger.child({ component: "webhooks" });
    const metrics = new WebhookMetrics(o.registry, { queued: () => this.#sender.queued });
    this.#sender = new WebhookSender({
      config: o.config,
      dc: o.dc,
      clock: o.clock,
      logger,
      metrics,
    });
    this.occupancy = new Occupancy({
      rules: new OccupancyRules(o.config.thresholds, o.config.hysteresisPct),
      isLive: (dc) => o.liveness.isLive(dc),
      now: () => o.clock.now(),
      sink: this.#sender,
    });
    this.#stopListening = o.liveness.onChange((_dc, event) => {
      if (event.kind !== "gap") this.occupancy.dcChanged();
    });
    logger.info({ url: redacted(o.config.url), thresholds: o.config.thresholds }, "occupancy webhooks on");
  }

  /** Stops watching; what is queued is delivered for at most `drainMs` (WebhookSender.close). */
  close(drainMs: number): Promise<void> {
    this.#stopListening();
    return this.#sender.close(drainMs);
  }
}

/** The URL without credentials or query, which may carry a token: fit for a log line. */
function redacted(url: string): string {
  const u = new URL(url);
  return `${u.protocol}//${u.host}${u.pathname}`;
}
