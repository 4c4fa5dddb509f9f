/**
 * A TCP proxy standing for the network link between two data centers: NATS gateway connections
 * go through it, so a test can cut the link and heal it. Cutting resets every connection through
 * it and resets new ones at once while cut, as a broken WAN link does once TCP gives up; each
 * nats-server then re-dials on its own timer, and succeeds again once the link is healed.
 *
 * One proxy forwards one listening port to one target; a two-DC link is two proxies, one in front
 * of each DC's gateway port (`LinkProxyPair`), cut and healed together. A counter node's link to
 * its NATS server is one too (`TestCluster` with `natsLinks`), cut or made deaf (`deafen`: one
 * direction lost).
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { Transform } from "node:stream";
import { LOOPBACK } from "./ports.js";

export interface LinkProxyOptions {
  /** Where connections go, e.g. a nats-server's gateway port. */
  readonly targetPort: number;
  readonly targetHost?: string;
  /** Port to listen on; default a free one. */
  readonly port?: number;
}

export class LinkProxy {
  readonly #server: Server;
  readonly #pairs = new Set<[Socket, Socket]>();
  #target: { host: string; port: number };
  #cut = false;
  /** Bytes from the target are dropped (a one-way cut): what the client sends still arrives. */
  #deaf = false;
  /** Bytes from the client are dropped: what it sends never arrives (a link that stalls). */
  #mute = false;
  /** Bytes from clients wait in the proxy until `heal()` (`hold`). */
  #holding = false;
  /** Per connection held, the chunk waiting: forwarding it lets its stream go on. */
  #waiting: Array<() => void> = [];
  /** Connections whose bytes are dropped both ways, kept open at the client (`stallOpen`). */
  readonly #stalled = new WeakSet<[Socket, Socket]>();
  #port = 0;
  /** Connections accepted and forwarded since the proxy started. */
  connections = 0;

  private constructor(options: LinkProxyOptions) {
    this.#target = { host: options.targetHost ?? LOOPBACK, port: options.targetPort };
    this.#server = createServer((client) => this.#accept(client));
  }

  static async start(options: LinkProxyOptions): Promise<LinkProxy> {
    const proxy = new LinkProxy(options);
    await new Promise<void>((resolve, reject) => {
      proxy.#server.once("error", reject);
      proxy.#server.listen(options.port ?? 0, LOOPBACK, () => resolve());
    });
    const address = proxy.#server.address();
    proxy.#port = typeof address === "object" && address !== null ? address.port : 0;
    return proxy;
  }

  get port(): number {
    return this.#port;
  }

  get isCut(): boolean {
    return this.#cut;
  }

  /** Connections currently forwarded. */
  get open(): number {
    return this.#pairs.size;
  }

  /** Resets every connection and refuses new ones (accepted, then reset) until `heal()`. */
  cut(): void {
    this.#cut = true;
    for (const [a, b] of this.#pairs) {
      a.resetAndDestroy();
      b.resetAndDestroy();
    }
    this.#pairs.clear();
  }

  heal(): void {
    this.#cut = false;
    this.#deaf = false;
    this.#mute = false;
    this.#holding = false;
    for (const forward of this.#waiting.splice(0)) forward();
  }

  /**
   * Holds everything clients send, on open connections and new ones, until `heal()`, which
   * forwards it all in order: calls arrive late, all at once, as over a link that stopped moving
   * for a while (or a server that did), and their answers come after them.
   */
  hold(): void {
    this.#holding = true;
  }

  /** Drops everything clients send, on open connections and new ones, until `heal()`: calls sent then never arrive. */
  mute(): void {
    this.#mute = true;
  }

  /**
   * Drops everything the target sends, on open connections and new ones, until `heal()`: a
   * network that loses one direction only. The client's bytes still arrive, so it is heard while it
   * hears nothing.
   */
  deafen(): void {
    this.#deaf = true;
  }

  /**
   * Drops everything both ways on the connections open now, and keeps them open at the client even
   * when the target closes its side: a NAT or proxy that forgot their flows without a word, so the
   * client learns nothing. New connections pass, as a new flow through that NAT would.
   */
  stallOpen(): void {
    for (const pair of this.#pairs) this.#stalled.add(pair);
  }

  /**
   * Sends new connections to `port` (open ones stay where they are): a server restarted on another
   * port, as a load balancer would route to it.
   */
  retarget(port: number): void {
    this.#target = { ...this.#target, port };
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(client: Socket): void {
    if (this.#cut) {
      client.resetAndDestroy();
      return;
    }
    this.connections++;
    client.setNoDelay(true);
    const upstream = createConnection(this.#target);
    upstream.setNoDelay(true);
    const pair: [Socket, Socket] = [client, upstream];
    this.#pairs.add(pair);
    const drop = (): void => {
      this.#pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", drop).on("close", drop);
    // A stalled connection's client hears nothing of the target's close: it stays open until it
    // gives up on its own, or the proxy is cut or closed.
    const upstreamGone = (): void => (this.#stalled.has(pair) ? void upstream.destroy() : drop());
    upstream.on("error", upstreamGone).on("close", upstreamGone);
    const unless = (drop: () => boolean): Transform =>
      new Transform({
        transform: (chunk: Buffer, _encoding, done) => done(null, drop() ? undefined : chunk),
      });
    const toTarget = new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        if (this.#mute || this.#stalled.has(pair)) done();
        // The stream reads nothing more until the chunk is forwarded, so order is kept.
        else if (this.#holding) this.#waiting.push(() => done(null, chunk));
        else done(null, chunk);
      },
    });
    client.pipe(toTarget).pipe(upstream);
    const toClient = upstream.pipe(unless(() => this.#deaf || this.#stalled.has(pair)));
    toClient.pipe(client, { end: false });
    toClient.on("end", () => this.#stalled.has(pair) || client.end());
  }
}

/** The link between two DCs: a proxy in front of each DC's gateway port, cut and healed together. */
export class LinkProxyPair {
  private constructor(readonly proxies: readonly LinkProxy[]) {}

  /** One proxy per target gateway port, in the same order. */
  static async start(targetPorts: readonly number[]): Promise<LinkProxyPair> {
    const proxies: LinkProxy[] = [];
    for (const targetPort of targetPorts) proxies.push(await LinkProxy.start({ targetPort }));
    return new LinkProxyPair(proxies);
  }

  get isCut(): boolean {
    return this.proxies.some((p) => p.isCut);
  }

  cut(): void {
    for (const p of this.proxies) p.cut();
  }

  heal(): void {
    for (const p of this.proxies) p.heal();
  }

  /** Heals only the proxy in front of target `index`: the direction of traffic into that DC. */
  healInto(index: number): void {
    const proxy = this.proxies[index];
    if (proxy === undefined) throw new Error(`no proxy ${index}`);
    proxy.heal();
  }

  async close(): Promise<void> {
    await Promise.all(this.proxies.map((p) => p.close()));
  }
}
