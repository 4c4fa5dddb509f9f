import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, test } from "vitest";
import type { TemplatedApp } from "uWebSockets.js";
import { uWS } from "../src/uws.js";
import { readGatewayConfig } from "../src/gateway_config.js";
import { ListenSockets } from "../src/listen_sockets.js";
import { freePort } from "../../../test/support/ports.js";

const HOST = "127.0.0.1";
/** /proc/net/tcp's state of a listening socket. */
const TCP_LISTEN = "0A";

/** Sockets listening on 127.0.0.1:`port`, as the kernel lists them. */
function listening(port: number): number {
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  return readFileSync("/proc/net/tcp", "utf8")
    .split("\n")
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f[1] === local && f[3] === TCP_LISTEN).length;
}

function app(): TemplatedApp {
  return uWS.App().get("/*", (res) => {
    res.end("ok");
  });
}

describe("gateway - listen sockets", () => {
  const opened: ListenSockets[] = [];
  const servers: Server[] = [];
  afterEach(async () => {
    for (const s of opened.splice(0)) s.close();
    for (const s of servers.splice(0)) await new Promise((resolve) => s.close(resolve));
  });

  test("listen sockets - several sockets on one port are several accept queues, all serving the app, up to the limit of 64", async () => {
    const port = await freePort();
    const sockets = new ListenSockets();
    opened.push(sockets);
    expect(await sockets.open(app(), HOST, port, 64)).toBe(port);
    expect(sockets.size).toBe(64);
    expect(listening(port)).toBe(64);
    // The kernel spreads connections over the queues by their addresses: enough of them reach each.
    const replies = await Promise.all(
      Array.from({ length: 64 }, () =>
        fetch(`http://${HOST}:${port}/`, { keepalive: false }).then((r) => r.text()),
      ),
    );
    expect(replies).toEqual(Array(64).fill("ok"));
    sockets.close();
    expect(listening(port)).toBe(0);
    await expect(fetch(`http://${HOST}:${port}/`)).rejects.toThrow();
    sockets.close();
  });

  test("listen sockets - a port of 0 is listened on once, on the port the kernel picked", async () => {
    const sockets = new ListenSockets();
    opened.push(sockets);
    const port = await sockets.open(app(), HOST, 0, 8);
    expect(port).toBeGreaterThan(0);
    expect(sockets.size).toBe(1);
    expect(listening(port)).toBe(1);
    expect(await (await fetch(`http://${HOST}:${port}/`)).text()).toBe("ok");
  });

  test("listen sockets - a port held by another process's socket is refused, and nothing is left listening", async () => {
    const other = createServer();
    servers.push(other);
    await new Promise<void>((resolve) => other.listen(0, HOST, resolve));
    const { port } = other.address() as { port: number };
    const sockets = new ListenSockets();
    opened.push(sockets);
    await expect(sockets.open(app(), HOST, port, 4)).rejects.toThrow(`cannot listen on ${HOST}:${port}`);
    expect(sockets.size).toBe(0);
    expect(listening(port)).toBe(1);
  });

  test("listen sockets - a port another gateway listens on (SO_REUSEPORT) is refused, not shared", async () => {
    const port = await freePort();
    const first = new ListenSockets();
    const second = new ListenSockets();
    opened.push(first, second);
    await first.open(app(), HOST, port, 2);
    await expect(second.open(app(), HOST, port, 2)).rejects.toThrow(
      `cannot listen on ${HOST}:${port}: another process listens there`,
    );
    expect(second.size).toBe(0);
    expect(listening(port)).toBe(2);
    // Once the first has stopped, the port is free again.
    first.close();
    expect(await second.open(app(), HOST, port, 2)).toBe(port);
    expect(listening(port)).toBe(2);
  });

  test("config - LIVECOUNT_LISTEN_SOCKETS is 32 by default and takes 1..64", () => {
    expect(readGatewayConfig({}).listenSockets).toBe(32);
    expect(readGatewayConfig({ LIVECOUNT_LISTEN_SOCKETS: "1" }).listenSockets).toBe(1);
    expect(readGatewayConfig({ LIVECOUNT_LISTEN_SOCKETS: "64" }).listenSockets).toBe(64);
    for (const bad of ["0", "65", "2.5", "many"])
      expect(() => readGatewayConfig({ LIVECOUNT_LISTEN_SOCKETS: bad })).toThrow(/LIVECOUNT_LISTEN_SOCKETS/);
  });
});
