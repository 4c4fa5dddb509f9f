export { connectBus, openStore } from "./adapters.js";
export {
  BUS_SILENCE_HEARTBEATS,
  BusPulse,
  IN_PROCESS_BUS,
  BusSilence,
  registerBusPulseMetrics,
  type BusHealth,
  type BusPulseOptions,
  type BusState,
} from "./bus_pulse.js";
export { HEARTBEATS_PER_LEASE, readClusterConfig, type ClusterConfig } from "./cluster_config.js";
export {
  DcLiveness,
  type DcEvent,
  type DcListener,
  type DcLivenessOptions,
  type KeysTaken,
} from "./dc_liveness.js";
export { registerDcMetrics } from "./dc_metrics.js";
export {
  GatewayHeartbeatSender,
  listenToGateways,
  probeGateway,
  probeReleasedGateway,
  type GatewayHeartbeatOptions,
  type GatewayPresence,
} from "./gateway_heartbeat.js";
export {
  GatewayIdInUseError,
  GatewayIdUnknownError,
  claimGatewayId,
  serveGatewayId,
  type GatewayIdClaimOptions,
  type GatewayIdHolder,
} from "./gateway_id.js";
export {
  GatewayLeases,
  type GatewayLease,
  type GatewayOrigin,
  type PresenceVerdict,
} from "./gateway_leases.js";
export {
  RELEASED_MEMORY_CAP,
  RELEASED_MEMORY_MS,
  ReleasedGateways,
  type Released,
} from "./released_gateways.js";
export {
  Membership,
  type MembershipOptions,
  type RingListener,
  type Successor,
  type SupersededListener,
} from "./membership.js";
export { isLaterTwin, type ProcessStart } from "./twins.js";
