import { readFileSync } from "node:fs";

/** Descriptors a gateway holds besides its clients' sockets: listen sockets aside, NATS, libuv, files. */
const OTHER_DESCRIPTORS = 64;

/**
 * The soft limit on this process's open files (`ulimit -n`), read from Linux's /proc/self/limits;
 * undefined where it cannot be read, or is unlimited.
 */
export function openFilesLimit(limits?: string): number | undefined {
  let text = limits;
  if (text === undefined) {
    try {
      text = readFileSync("/proc/self/limits", "utf8");
    } catch {
      return undefined;
    }
  }
  const soft = /^Max open files\s+(\d+)\s/m.exec(text)?.[1];
  return soft === undefined ? undefined : Number(soft);
}

/**
 * Why `maxConnections` client sockets (LIVECOUNT_MAX_CONNECTIONS) cannot all be open at once under
 * the open-files limit, or undefined when they can (or the limit is unknown). Past the limit a new
 * connection fails in the kernel, before the gateway can answer it with a 503.
 */
export function connectionsOverFileLimit(
  maxConnections: number,
  listenSockets: number,
  limit: number | undefined,
): string | undefined {
  if (limit === undefined) return undefined;
  const needed = maxConnections + listenSockets + OTHER_DESCRIPTORS;
  if (needed <= limit) return undefined;
  return (
    `LIVECOUNT_MAX_CONNECTIONS (${maxConnections}) needs about ${needed} open files, above this process's limit of ` +
    `${limit} (ulimit -n): raise the limit or lower the setting, or connections past it fail unanswered`
  );
}
