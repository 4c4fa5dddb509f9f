/**
 * The port helper every test server starts on: ports handed out one after another, before any
 * server binds them, are distinct, lie below the kernel's ephemeral range, and skip ports someone
 * already listens on.
 */
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { expect, onTestFinished, test } from "vitest";
import { freePort, freePorts, LOOPBACK } from "./ports.js";

const ASKED = 2_000;

function ephemeralStart(): number {
  return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
}

async function listen(port: number): Promise<Server | undefined> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once("error", () => resolve(undefined));
    server.listen(port, LOOPBACK, () => resolve(server));
  });
}

test("support - 2,000 ports asked for before any is bound are distinct and below the ephemeral range", async () => {
  const ports = await freePorts(ASKED);
  expect(new Set(ports).size).toBe(ASKED);
  const limit = ephemeralStart();
  for (const port of ports) {
    expect(port).toBeGreaterThanOrEqual(10_240);
    expect(port).toBeLessThan(limit);
  }
});

test("support - a port someone listens on is never handed out", async () => {
  const before = await freePort();
  // The next ports in line, taken by another listener before the helper probes them.
  const taken: number[] = [];
  for (let port = before + 1; taken.length < 3 && port < before + 20; port++) {
    const server = await listen(port);
    if (server === undefined) continue;
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    taken.push(port);
  }
  expect(taken.length).toBe(3);
  const after = await freePorts(5);
  for (const port of after) expect(taken).not.toContain(port);
  // Each port given is one a server can listen on now.
  for (const port of after) {
    const server = await listen(port);
    expect(server, `port ${port}`).toBeDefined();
    await new Promise<void>((resolve) => server!.close(() => resolve()));
  }
});
