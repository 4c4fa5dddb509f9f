import { createServer } from "node:net";
import type { TemplatedApp, us_listen_socket } from "uWebSockets.js";
import { uWS } from "./uws.js";

/**
 * The listen sockets of one app, all on one port. uWS listens with a fixed backlog of 512 (not
 * configurable), and a handshake that finds that accept queue full is dropped by the kernel: the
 * client's kernel retries its SYN after 1 s, then 3 s, 7 s. That is the tail of a reconnect storm,
 * where a restarted gateway's whole audience comes back within a second or two while one event-loop
 * turn (upgrades and joins of a thousand sockets) takes some 100 ms.
 *
 * On Linux uSockets sets SO_REUSEPORT on a socket listening on a given port, so listening several
 * times on it gives several accept queues, and the kernel spreads new connections over them by a
 * hash of their addresses: `count` sockets hold `count` x 512 handshakes between two turns. A port of
 * 0 (a free one picked by the kernel) is listened on once: uSockets sets no SO_REUSEPORT there.
 *
 * SO_REUSEPORT would also let a second process listening on the port with it (another gateway
 * given the same port, an old one still draining) take part of the connections without an error
 * anywhere. So the port is first bound without it, and closed again: that fails while anything
 * listens there, and the gateway refuses to start rather than share its port.
 */
export class ListenSockets {
  readonly #sockets: us_listen_socket[] = [];

  /**
   * Listens `count` times on `host`:`port`; resolves with the port (the picked one for 0). Rejects,
   * with every socket closed again, when any listen fails.
   */
  async open(app: TemplatedApp, host: string, port: number, count: number): Promise<number> {
    const times = port === 0 ? 1 : count;
    if (port !== 0) await ensureFree(host, port);
    for (let i = 0; i < times; i++) {
      const socket = await listenOnce(app, host, port);
      if (socket === false) {
        this.close();
        throw new Error(`cannot listen on ${host}:${port} (socket ${i + 1} of ${times})`);
      }
      this.#sockets.push(socket);
    }
    return uWS.us_socket_local_port(this.#sockets[0]!);
  }

  /** How many sockets listen (diagnostics and tests). */
  get size(): number {
    return this.#sockets.length;
  }

  /** Stops listening; handshakes still queued on a socket are reset by the kernel. Idempotent. */
  close(): void {
    for (const socket of this.#sockets.splice(0)) uWS.us_listen_socket_close(socket);
  }
}

function listenOnce(app: TemplatedApp, host: string, port: number): Promise<us_listen_socket | false> {
  return new Promise((resolve) => app.listen(host, port, resolve));
}

/** Rejects when anything listens on `host`:`port` (bound without SO_REUSEPORT, then closed). */
function ensureFree(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        new Error(
          err.code === "EADDRINUSE"
            ? `cannot listen on ${host}:${port}: another process listens there`
            : `cannot listen on ${host}:${port}: ${err.message}`,
        ),
      ),
    );
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}
