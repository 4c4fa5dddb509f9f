export {
  HashRing,
  RingError,
  partitionOf,
  DEFAULT_PARTITIONS,
  DEFAULT_VNODES,
  MAX_PARTITIONS,
  MAX_VNODES,
  type HashRingOptions,
} from "./hash_ring.js";
export { murmur3, murmur3Bytes } from "./murmur3.js";
