import type { Bus, Subscription } from "@livecount/bus";
import { HEARTBEATS_PER_LEASE, listenToGateways, probeGateway, type Membership } from "@livecount/cluster";
import type { Logger } from "@livecount/runtime";
import type { PresenceIntake } from "./presence_intake.js";

export interface GatewayWatch {
  readonly bus: Bus;
  readonly dc: string;
  readonly logger: Logger;
  readonly intake: PresenceIntake;
  readonly membership: Membership;
  readonly gatewayLeaseMs: number;
  readonly isRunning: () => boolean;
}

/**
 * Gateways' heartbeats into the presence intake. A gateway that just started learns the ring from
 * node heartbeats: it gets one now rather than routing nothing until the next (up to a third of the
 * node lease). And the earlier incarnations of its node are asked whether they still run: one with
 * no responder any more is gone (kill -9, a crash) and is released now rather than once it has
 * missed a heartbeat, up to 5 s later (GatewayLeases.supersede, which still covers an unanswered
 * probe). The probe waits at most a heartbeat interval: past that, the missed heartbeat decides.
 */
export function watchGateways(o: GatewayWatch): Subscription {
  const probeMs = o.gatewayLeaseMs / HEARTBEATS_PER_LEASE;
  return listenToGateways(o.bus, o.dc, o.logger, (beat) => {
    if (!o.intake.heartbeat(beat)) return;
    o.membership.announce();
    for (const earlier of o.intake.predecessors(beat.gateway)) {
      void probeGateway(o.bus, o.dc, earlier, probeMs).then((presence) => {
        if (presence === "gone" && o.isRunning()) o.intake.gone(earlier);
      });
    }
  });
}
