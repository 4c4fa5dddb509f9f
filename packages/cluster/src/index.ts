export { connectBus, openStore } from "./adapters.js";
export { HEARTBEATS_PER_LEASE, readClusterConfig, type ClusterConfig } from "./cluster_config.js";
export { Membership, type MembershipOptions, type RingListener } from "./membership.js";
