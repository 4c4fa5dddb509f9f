/** Free TCP ports for servers started by tests. */
import { createServer } from "node:net";

export const LOOPBACK = "127.0.0.1";

/**
 * A port nobody listens on right now, found by binding port 0 and releasing it. Another process
 * may take it before the caller binds it, so callers retry a failed start on a fresh port.
 */
export async function freePort(host: string = LOOPBACK): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? resolve(port) : reject(new Error("no port assigned"))));
    });
  });
}

/** `count` distinct free ports, e.g. client, cluster and gateway ports of one server. */
export async function freePorts(count: number, host: string = LOOPBACK): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort(host));
  return [...ports];
}
