/**
 * Leaving a NATS server that answers nothing while its connection stays open (NatsBus.reconnect):
 * the one thing nats.js 2's API cannot do, since its own `reconnect()` dials the same server first
 * and waits for the socket to drain.
 */
import type { NatsConnection } from "nats";

/**
 * Closes `nc`'s connection so that nats.js dials another server of its list first; false, and
 * nothing done, when it knows no other. The server this connection is on is the entry dialed and
 * any that names the address the socket is connected to (a client given a DNS name, or a Service's,
 * learns the servers' own addresses by gossip, the one it is on among them).
 */
export function leaveServer(nc: NatsConnection): boolean {
  const { servers, transport } = natsInternals(nc);
  const known = servers.getServers();
  const socket = transport.socket;
  const on = (s: NatsServerEntry): boolean =>
    s === servers.getCurrentServer() ||
    (s.port === socket?.remotePort && s.hostname === unmapped(socket.remoteAddress));
  const left = known.filter(on);
  if (left.length === known.length) return false;
  // The next dial takes the first server of the list: not the one left (nats.go does the same;
  // nats.js 2 dials it again first, where a dial that times out leaves its socket open, and a thaw
  // then wires that socket to the connection too: every message twice).
  known.splice(0, known.length, ...known.filter((s) => !on(s)), ...left);
  // Closed with an error, not `nc.reconnect()`: that first waits for the socket to take what is
  // queued, which a silent server's full socket never does. The close starts the client's
  // reconnect as any lost connection does.
  void transport.close(new Error("server silent")).catch(() => {});
  return true;
}

/**
 * The parts of nats.js 2.29.3 (pinned in packages/bus/package.json) that `leaveServer` needs and its
 * API does not give: the server list its dials take from, and the transport, to close it hard (and
 * its socket, to tell which server of the list it is connected to). nats.js 3 lets a client choose
 * the server it reconnects to (`reconnect(server)`, `reconnectToServer`). packages/bus/test/
 * nats_bus.test.ts fails if these change: a move would wait out a dial of the silent server.
 */
interface NatsInternals {
  readonly servers: { getServers(): NatsServerEntry[]; getCurrentServer(): NatsServerEntry };
  readonly transport: {
    readonly socket?: { readonly remoteAddress?: string; readonly remotePort?: number };
    close(err?: Error): Promise<void>;
  };
}

/** A server of nats.js's list (its `ServerImpl`): where it dials. */
interface NatsServerEntry {
  readonly hostname: string;
  readonly port: number;
}

/** An IPv4 address as nats.js writes it, from the IPv4-mapped IPv6 form a socket may report. */
function unmapped(address: string | undefined): string | undefined {
  return address?.startsWith("::ffff:") === true ? address.slice("::ffff:".length) : address;
}

function natsInternals(nc: NatsConnection): NatsInternals {
  return (nc as unknown as { protocol: NatsInternals }).protocol;
}
