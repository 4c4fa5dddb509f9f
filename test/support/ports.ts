/**
 * Ports for servers started by tests, handed out so that two servers never race for one.
 *
 * Binding port 0 and releasing it is not enough: the kernel may give that same port to the next
 * caller, in this process or in another test worker, before the first server binds it, and then one
 * of the two fails to start while the other answers in its place. So ports come from below the
 * kernel's ephemeral range (where port 0 and outgoing connections draw theirs), each vitest worker
 * from a slice of its own, each port at most once per test process, and only after a probe shows
 * nobody listens there.
 */
import { readFileSync } from "node:fs";
import { createServer } from "node:net";

export const LOOPBACK = "127.0.0.1";

/** Below this are the well-known and registered ports of services a machine may run (6379, 4222, 5432...). */
const LOWEST = 10_240;
/** Workers get disjoint slices; more workers than slices share them by modulo. */
const SLICES = 8;

interface Allocator {
  readonly first: number;
  readonly size: number;
  next: number;
  readonly given: Set<number>;
}

/** The first port the kernel picks from for port 0 and outgoing connections (Linux: 32768 by default). */
function ephemeralStart(): number {
  try {
    const first = Number(
      readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0],
    );
    if (Number.isInteger(first) && first > LOWEST + SLICES * 256) return first;
  } catch {
    // Not Linux, or no procfs: the IANA dynamic range starts at 49152, Linux's default at 32768.
  }
  return 32_768;
}

/**
 * This process's allocator, kept on globalThis so that test files sharing a worker process (module
 * state is per file) keep handing out distinct ports.
 */
function allocator(): Allocator {
  const key = Symbol.for("livecount.test.ports");
  const holder = globalThis as unknown as Record<symbol, Allocator | undefined>;
  const existing = holder[key];
  if (existing !== undefined) return existing;
  const size = Math.floor((ephemeralStart() - LOWEST) / SLICES);
  const worker = Number(process.env.VITEST_POOL_ID ?? process.env.VITEST_WORKER_ID ?? 1);
  // A second vitest run beside this one (test/run.mjs) numbers its workers from 1 too: it keeps to
  // the slices from the offset on, the first run's workers to those below it.
  const offset = Number(process.env.LIVECOUNT_TEST_PORT_SLICE_OFFSET ?? 0);
  const index = Number.isInteger(worker) && worker > 0 ? worker - 1 : 0;
  const slice =
    Number.isInteger(offset) && offset > 0 && offset < SLICES
      ? offset + (index % (SLICES - offset))
      : index % SLICES;
  // A random start, so a worker's next file does not begin where its last one's servers may linger.
  const created: Allocator = {
    first: LOWEST + slice * size,
    size,
    next: Math.floor(Math.random() * size),
    given: new Set(),
  };
  holder[key] = created;
  return created;
}

/** Whether a server could listen on `port` right now (bound for a moment, then released). */
async function listenable(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** A port nobody listens on and no caller in this process was given before. */
export async function freePort(host: string = LOOPBACK): Promise<number> {
  const a = allocator();
  for (let tried = 0; tried < a.size; tried++) {
    const port = a.first + (a.next++ % a.size);
    if (a.given.has(port)) continue;
    a.given.add(port);
    if (await listenable(port, host)) return port;
  }
  throw new Error(`no free port left in ${a.first}..${a.first + a.size - 1}`);
}

/** `count` distinct free ports, e.g. client, cluster and gateway ports of one server. */
export async function freePorts(count: number, host: string = LOOPBACK): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < count) ports.push(await freePort(host));
  return ports;
}
