/** Types of `cluster-key-slot` (ioredis's own slot function), which ships none. */
declare module "cluster-key-slot" {
  /** The Redis Cluster hash slot of a key: CRC16 of its hash tag (or of the whole key) mod 16384. */
  function calculateSlot(key: string | Buffer): number;
  export default calculateSlot;
}
