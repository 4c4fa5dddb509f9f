/**
 * Starts a real `redis-server` for integration tests: a free port on 127.0.0.1, its own temp dir,
 * no RDB snapshots, optional AOF. `kill()` simulates a crash; `restart()` brings the server back on
 * the same port and dir so AOF recovery can be tested, or empty after `wipe()`, as a rebuilt machine.
 *
 * The binary comes from LIVECOUNT_REDIS_SERVER, else PATH, else /usr/bin/redis-server. Without one,
 * suites wrapped in `describeWithRedis` are skipped with a warning, except under CI where a missing
 * server is an error.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, LOOPBACK as HOST } from "./ports.js";
import { describeWithBinary, findBinary } from "./binaries.js";

const FALLBACK_BINARY = "/usr/bin/redis-server";
const READY_TIMEOUT_MS = 10_000;
const READY_POLL_MS = 25;
const PING_TIMEOUT_MS = 1_000;
const STOP_GRACE_MS = 5_000;
/** Tries to start on a fresh port again when another process took the probed one meanwhile. */
const START_ATTEMPTS = 3;
/** Keeps the tail of the server's log for error messages. */
const LOG_TAIL_CHARS = 4_000;

export interface RedisServerOptions {
  /** Enables the append-only file. Default false: tests that need durability opt in. */
  readonly appendonly?: boolean;
  /** AOF fsync policy; `always` makes every acknowledged write survive kill -9. Default everysec. */
  readonly appendfsync?: "everysec" | "always";
  /** Appended to the command line, e.g. cluster mode for `RedisCluster`; a later option wins. */
  readonly extraArgs?: readonly string[];
}

/** Path of the redis-server binary, or undefined when none is installed. */
export function redisServerBinary(): string | undefined {
  return findBinary("redis-server", "LIVECOUNT_REDIS_SERVER", FALLBACK_BINARY);
}

export function redisServerAvailable(): boolean {
  return redisServerBinary() !== undefined;
}

/** `describe` for suites that need a real redis-server: skipped loudly without one, failed under CI. */
export function describeWithRedis(name: string, fn: () => void): void {
  describeWithBinary(
    redisServerAvailable(),
    "redis-server not found (set LIVECOUNT_REDIS_SERVER or install it)",
    name,
    fn,
  );
}

/** Resolves with the first line the server answers to PING (`+PONG`, or `-LOADING ...`). */
async function ping(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: HOST, port });
    let reply = "";
    socket.setEncoding("utf8");
    socket.setTimeout(PING_TIMEOUT_MS, () => socket.destroy(new Error("ping timed out")));
    socket.once("error", reject);
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (chunk: string) => {
      reply += chunk;
      const end = reply.indexOf("\r\n");
      if (end < 0) return;
      socket.destroy();
      resolve(reply.slice(0, end));
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class RedisServer {
  /** Servers not stopped yet: killed and their dirs deleted if the test process ends first. */
  static readonly #unstopped = new Set<RedisServer>();
  static {
    const cleanUp = (): void => {
      for (const server of RedisServer.#unstopped) {
        server.#child?.kill("SIGKILL");
        rmSync(server.dir, { recursive: true, force: true });
      }
    };
    process.once("exit", cleanUp);
    // Vitest ends its workers with SIGTERM, which skips "exit": clean up, then die of the signal.
    process.once("SIGTERM", () => {
      cleanUp();
      process.kill(process.pid, "SIGTERM");
    });
  }

  #child: ChildProcess | undefined;
  #exited: Promise<void> = Promise.resolve();
  #log = "";

  private constructor(
    readonly binary: string,
    readonly port: number,
    readonly dir: string,
    readonly options: RedisServerOptions,
  ) {}

  static async start(options: RedisServerOptions = {}): Promise<RedisServer> {
    const binary = redisServerBinary();
    if (binary === undefined) throw new Error("redis-server not found (set LIVECOUNT_REDIS_SERVER)");
    const dir = mkdtempSync(join(tmpdir(), "livecount-redis-"));
    for (let attempt = 1; ; attempt++) {
      const server = new RedisServer(binary, await freePort(), dir, options);
      try {
        await server.#launch();
        RedisServer.#unstopped.add(server);
        return server;
      } catch (err) {
        if (attempt >= START_ATTEMPTS) {
          rmSync(dir, { recursive: true, force: true });
          throw err;
        }
      }
    }
  }

  get url(): string {
    return `redis://${HOST}:${this.port}`;
  }

  get running(): boolean {
    return this.#child !== undefined;
  }

  /** The tail of the server's log, for error messages. */
  get log(): string {
    return this.#log;
  }

  /** Simulates a crash: SIGKILL, no shutdown work. The dir is kept for `restart()`. */
  async kill(): Promise<void> {
    await this.#terminate("SIGKILL");
  }

  /** Deletes the data of a stopped server (its AOF): the next `restart()` starts with an empty store. */
  wipe(): void {
    if (this.running) throw new Error(`redis-server on port ${this.port} is running; kill it before wiping`);
    rmSync(this.dir, { recursive: true, force: true });
    mkdirSync(this.dir);
  }

  /** Stops the server if it runs (gracefully) and starts it again on the same port and dir. */
  async restart(): Promise<void> {
    await this.#terminate("SIGTERM");
    await this.#launch();
  }

  /** Stops the server (SIGTERM, then SIGKILL after a grace period) and deletes its dir. */
  async stop(): Promise<void> {
    await this.#terminate("SIGTERM");
    rmSync(this.dir, { recursive: true, force: true });
    RedisServer.#unstopped.delete(this);
  }

  async #launch(): Promise<void> {
    const { appendonly = false, appendfsync = "everysec", extraArgs = [] } = this.options;
    // prettier-ignore
    const args = [
      "--port", String(this.port),
      "--bind", HOST,
      "--dir", this.dir,
      "--save", "",
      "--appendonly", appendonly ? "yes" : "no",
      "--appendfsync", appendfsync,
      "--logfile", "",
      ...extraArgs,
    ];
    const child = spawn(this.binary, args, { stdio: ["ignore", "pipe", "pipe"] });
    this.#child = child;
    this.#log = "";
    const keepLog = (chunk: Buffer): void => {
      this.#log = (this.#log + chunk.toString("utf8")).slice(-LOG_TAIL_CHARS);
    };
    child.stdout?.on("data", keepLog);
    child.stderr?.on("data", keepLog);
    this.#exited = new Promise((resolve) => {
      child.once("exit", () => {
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
        throw new Error(`redis-server exited on port ${this.port}:\n${this.#log}`);
      }
      // Refused while starting, -LOADING while replaying the AOF.
      const reply = await ping(this.port).catch(() => "");
      if (reply === "+PONG") return;
      await sleep(READY_POLL_MS);
    }
    throw new Error(
      `redis-server not ready on port ${this.port} after ${READY_TIMEOUT_MS} ms:\n${this.#log}`,
    );
  }

  async #terminate(signal: "SIGTERM" | "SIGKILL"): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    child.kill(signal);
    if (signal === "SIGTERM") {
      const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
      await this.#exited;
      clearTimeout(timer);
    } else {
      await this.#exited;
    }
  }
}
