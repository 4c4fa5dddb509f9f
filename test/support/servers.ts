import { describeWithBinary } from "./binaries.js";
import { natsServerAvailable } from "./nats_server.js";
import { redisServerAvailable } from "./redis_server.js";

/** `describe` for suites that need nats-server and redis-server: skipped loudly without them, failed under CI. */
export function describeWithServers(name: string, fn: () => void): void {
  describeWithBinary(
    natsServerAvailable() && redisServerAvailable(),
    "nats-server and redis-server are required",
    name,
    fn,
  );
}
