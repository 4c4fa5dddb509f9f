/**
 * Starts a real `nats-server` for integration tests: a free client port on 127.0.0.1, its own temp
 * dir holding a generated config file, JetStream off unless asked for. `restart()` brings it back on
 * the same port (reconnect tests), `kill()` simulates a crash, `pause()`/`resume()` freeze it with
 * SIGSTOP/SIGCONT (a server that accepts nothing but keeps its sockets open), and `config` appends
 * blocks such as `cluster { ... }` or `gateway { ... }` to build clusters and multi-DC super clusters
 * (take their ports from `freePorts` in ports.ts). `startNatsCluster(n)` starts n servers joined by
 * routes into one NATS cluster.
 *
 * The binary comes from LIVECOUNT_NATS_SERVER, else `nats-server` on PATH, else
 * /usr/sbin/nats-server. Without one, suites wrapped in `describeWithNats` are skipped with a
 * warning, except under CI where a missing server is an error.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, freePorts, LOOPBACK } from "./ports.js";
import { eventually } from "./eventually.js";
import { describeWithBinary, findBinary, underCi } from "./binaries.js";

const FALLBACK_BINARY = "/usr/sbin/nats-server";
const READY_TIMEOUT_MS = 10_000;
const READY_POLL_MS = 25;
const STOP_GRACE_MS = 5_000;
/** Tries to start on a fresh port again when another process took the probed one meanwhile. */
const START_ATTEMPTS = 3;
/** Keeps the tail of the server's log for error messages. */
const LOG_TAIL_CHARS = 4_000;
/** A NATS server greets every client with an INFO line before anything else. */
const GREETING = "INFO ";
/** How long pause() and resume() wait for the signal to take effect, and how often they look. */
const SIGNAL_TIMEOUT_MS = 5_000;
const SIGNAL_POLL_MS = 1;
/** /proc thread states of a stopped thread: stopped by a signal (T) or by a tracer (t). */
const STOPPED_STATES = new Set(["T", "t"]);
/** Logged once every listener is up; also proves the greeting came from this process. */
const READY_LOG_LINE = "Server is ready";

export interface NatsServerOptions {
  /**
   * Client port. Default: a free one. Give one when other servers' config must name it before this
   * server starts.
   */
  readonly port?: number;
  /** `server_name`; default `lc-test-<port>`. Servers of one cluster or super cluster need distinct names. */
  readonly name?: string;
  /** Enables JetStream with its store in the temp dir. Default false: livecount uses NATS core only. */
  readonly jetstream?: boolean;
  /**
   * Configuration appended verbatim to the generated file, e.g.
   * `gateway { name: dc1, listen: "127.0.0.1:7222", gateways: [{ name: dc2, url: "nats://127.0.0.1:7223" }] }`.
   */
  readonly config?: string;
}

/** Path of the nats-server binary, or undefined when none is installed. */
export function natsServerBinary(): string | undefined {
  return findBinary("nats-server", "LIVECOUNT_NATS_SERVER", FALLBACK_BINARY);
}

/**
 * Whether a nats-server binary is installed. Under CI (`CI` set) a missing binary throws instead,
 * so a misconfigured pipeline cannot pass by skipping.
 */
export function natsServerAvailable(): boolean {
  if (natsServerBinary() !== undefined) return true;
  if (underCi()) throw new Error("nats-server not found under CI (set LIVECOUNT_NATS_SERVER or install it)");
  return false;
}

/** `describe` for suites that need a real nats-server: skipped loudly without one, failed under CI. */
export function describeWithNats(name: string, fn: () => void): void {
  describeWithBinary(
    natsServerAvailable(),
    "nats-server not found (set LIVECOUNT_NATS_SERVER or install it)",
    name,
    fn,
  );
}

/** Whether whatever listens on the port greets like a NATS server. */
async function greeted(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: LOOPBACK, port });
    let text = "";
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setEncoding("utf8");
    socket.once("error", () => done(false));
    socket.once("close", () => done(false));
    socket.on("data", (chunk: string) => {
      text += chunk;
      if (text.length >= GREETING.length) done(text.startsWith(GREETING));
    });
  });
}

/** The state letter of a /proc/<pid>/task/<tid>/stat line; the command name before it may hold spaces. */
function threadState(stat: string): string {
  return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Servers still running, killed if the test process exits without stopping them. */
const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export class NatsServer {
  #child: ChildProcess | undefined;
  #exited: Promise<void> = Promise.resolve();
  #paused = false;
  #log = "";
  #loggedReady = false;

  private constructor(
    readonly binary: string,
    readonly port: number,
    readonly dir: string,
    readonly options: NatsServerOptions,
  ) {}

  /** Starts a server and waits until it accepts clients. */
  static async start(options: NatsServerOptions = {}): Promise<NatsServer> {
    const binary = natsServerBinary();
    if (binary === undefined) throw new Error("nats-server not found (set LIVECOUNT_NATS_SERVER)");
    const dir = mkdtempSync(join(tmpdir(), "livecount-nats-"));
    for (let attempt = 1; ; attempt++) {
      const server = new NatsServer(binary, options.port ?? (await freePort()), dir, options);
      try {
        await server.#launch();
        return server;
      } catch (err) {
        // Only a probed port can have been taken meanwhile; a fixed one fails the same way again.
        if (attempt >= START_ATTEMPTS || options.port !== undefined) {
          rmSync(dir, { recursive: true, force: true });
          throw err;
        }
      }
    }
  }

  /** Client URL, e.g. `nats://127.0.0.1:4333`. */
  get url(): string {
    return `nats://${LOOPBACK}:${this.port}`;
  }

  get running(): boolean {
    return this.#child !== undefined;
  }

  get paused(): boolean {
    return this.#paused;
  }

  /** The tail of the server's log (stderr), for assertion messages. */
  get log(): string {
    return this.#log;
  }

  /** Simulates a crash: SIGKILL, no shutdown work. The dir is kept for `restart()`. */
  async kill(): Promise<void> {
    await this.#terminate("SIGKILL");
  }

  /** Stops the server if it runs (gracefully) and starts it again on the same port and config. */
  async restart(): Promise<void> {
    await this.#terminate("SIGTERM");
    await this.#launch();
  }

  /**
   * Freezes the process (SIGSTOP): connections stay open but nothing is read or answered. Resolves
   * once every thread has stopped; signal delivery is asynchronous, and a server still running for
   * a moment would answer a request the test expects to go unanswered.
   */
  async pause(): Promise<void> {
    const child = this.#child;
    if (child === undefined || this.#paused) return;
    child.kill("SIGSTOP");
    this.#paused = true;
    await this.#waitThreads(child, true);
  }

  /** Thaws a paused server (SIGCONT); resolves once it runs again. */
  async resume(): Promise<void> {
    const child = this.#child;
    if (child === undefined || !this.#paused) return;
    child.kill("SIGCONT");
    this.#paused = false;
    await this.#waitThreads(child, false);
  }

  /** Stops the server (SIGTERM, then SIGKILL after a grace period) and deletes its dir. */
  async stop(): Promise<void> {
    await this.#terminate("SIGTERM");
    rmSync(this.dir, { recursive: true, force: true });
  }

  #writeConfig(): string {
    const { name = `lc-test-${this.port}`, jetstream = false, config = "" } = this.options;
    const lines = [
      `server_name: ${JSON.stringify(name)}`,
      `listen: "${LOOPBACK}:${this.port}"`,
      jetstream ? `jetstream { store_dir: ${JSON.stringify(join(this.dir, "jetstream"))} }` : "",
      config,
    ];
    const path = join(this.dir, "nats.conf");
    writeFileSync(path, lines.join("\n") + "\n");
    return path;
  }

  async #launch(): Promise<void> {
    const child = spawn(this.binary, ["-c", this.#writeConfig()], { stdio: ["ignore", "pipe", "pipe"] });
    this.#child = child;
    this.#paused = false;
    running.add(child);
    this.#log = "";
    this.#loggedReady = false;
    const keepLog = (chunk: Buffer): void => {
      this.#log = (this.#log + chunk.toString("utf8")).slice(-LOG_TAIL_CHARS);
      if (this.#log.includes(READY_LOG_LINE)) this.#loggedReady = true;
    };
    child.stdout?.on("data", keepLog);
    child.stderr?.on("data", keepLog);
    this.#exited = new Promise((resolve) => {
      child.once("exit", () => {
        running.delete(child);
        if (this.#child === child) this.#child = undefined;
        resolve();
      });
    });
    try {
      await this.#waitReady(child);
    } catch (err) {
      await this.#terminate("SIGKILL");
      throw err;
    }
  }

  async #waitReady(child: ChildProcess): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`nats-server exited on port ${this.port}:\n${this.#log}`);
      }
      if (this.#loggedReady && (await greeted(this.port))) return;
      await sleep(READY_POLL_MS);
    }
    throw new Error(`nats-server not ready on port ${this.port} after ${READY_TIMEOUT_MS} ms:\n${this.#log}`);
  }

  /** Polls the state of every thread of the process (Linux /proc) until all are stopped, or none. */
  async #waitThreads(child: ChildProcess, stopped: boolean): Promise<void> {
    const tasks = `/proc/${child.pid}/task`;
    const deadline = Date.now() + SIGNAL_TIMEOUT_MS;
    while (Date.now() < deadline) {
      let states: string[];
      try {
        states = readdirSync(tasks).map((tid) => threadState(readFileSync(join(tasks, tid, "stat"), "utf8")));
      } catch {
        return; // Not Linux, or the process is gone: nothing more to wait for.
      }
      if (states.every((state) => STOPPED_STATES.has(state) === stopped)) return;
      await sleep(SIGNAL_POLL_MS);
    }
    throw new Error(`nats-server on port ${this.port} did not ${stopped ? "stop" : "continue"} in time`);
  }

  async #terminate(signal: "SIGTERM" | "SIGKILL"): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    child.kill(signal);
    // A stopped process only acts on SIGTERM once continued (SIGKILL needs no help).
    if (this.#paused) child.kill("SIGCONT");
    if (signal === "SIGTERM") {
      const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
      await this.#exited;
      clearTimeout(timer);
    } else {
      await this.#exited;
    }
    this.#paused = false;
  }
}

/**
 * `count` nats-servers joined by routes into one NATS cluster (one plain server for 1), each with
 * `config` added to its own.
 */
export async function startNatsCluster(count: number, config = ""): Promise<NatsServer[]> {
  if (count === 1) return [await NatsServer.start({ config })];
  for (let attempt = 1; ; attempt++) {
    try {
      return await startRoutedServers(await freePorts(count), config);
    } catch (err) {
      // Every server names every route port: one taken since its probe means a fresh set for all.
      if (attempt >= START_ATTEMPTS || !ROUTE_PORT_TAKEN.test(String(err))) throw err;
    }
  }
}

/** nats-server's fatal line when another process bound its route port first. */
const ROUTE_PORT_TAKEN = /router port: \d+ - listen tcp [^:]+:\d+: bind: address already in use/;

async function startRoutedServers(routePorts: readonly number[], config: string): Promise<NatsServer[]> {
  const routes = routePorts.map((p) => `"nats://${LOOPBACK}:${p}"`).join(", ");
  const started: NatsServer[] = [];
  try {
    for (const port of routePorts) {
      const cluster = `cluster { name: lc-test, listen: "${LOOPBACK}:${port}", routes: [${routes}] }`;
      started.push(await NatsServer.start({ config: `${config}\n${cluster}` }));
    }
    // Clients given one server learn the others from it once its routes are up.
    await eventually(
      () => {
        for (const s of started)
          if ((s.log.match(/Route connection created/g) ?? []).length < routePorts.length - 1)
            throw new Error(`routes of ${s.url} not up:\n${s.log}`);
      },
      { timeoutMs: READY_TIMEOUT_MS, intervalMs: 25, message: "NATS cluster routes up" },
    );
  } catch (err) {
    await Promise.all(started.map((s) => s.stop()));
    throw err;
  }
  return started;
}
