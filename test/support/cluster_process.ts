/**
 * One gateway or counter node of a test cluster as a child process of the built output (`node
 * apps/<app>/dist/main.js`): killed (SIGKILL), frozen (SIGSTOP/SIGCONT), stopped (SIGTERM) and started
 * again with the same environment, its output appended to its own log file. Children are killed
 * when the test process exits, and when it gets SIGTERM.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync, writeSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { eventually, sleep } from "./eventually.js";
import { LOOPBACK } from "./ports.js";

export type ProcessKind = "counter" | "gateway";

const ENTRY: Readonly<Record<ProcessKind, string>> = {
  counter: fileURLToPath(new URL("../../apps/counter/dist/main.js", import.meta.url)),
  gateway: fileURLToPath(new URL("../../apps/gateway/dist/main.js", import.meta.url)),
};

/** The admin key of every cluster process: `/metrics` needs it. */
export const CLUSTER_ADMIN_KEY = "cluster-admin-key-000001";
/**
 * Headers of the tests' own truth checks: an operator reading with the admin key, which no
 * per-address read budget limits (the checks read every page many times a second).
 */
export const OPERATOR_HEADERS: Readonly<Record<string, string>> = {
  authorization: `Bearer ${CLUSTER_ADMIN_KEY}`,
};

/**
 * How long a started process may take to say it is ready. No test times a start with it: it only
 * bounds a failure. 40 s: the untimed clusters run two files at once, and beside the 150,000 reads
 * of unknown_pages.test.ts a counter node of a DC on Redis Cluster took 4 s to log its first line
 * and was not ready within 20 s.
 */
export const READY_TIMEOUT_MS = 40_000;
const STOP_TIMEOUT_MS = 10_000;
/** Lines of each process's log shown for a failed test. */
export const LOG_TAIL_LINES = 150;

/** Children still running, killed if the test process ends first. */
const children = new Set<ChildProcess>();
function killChildren(): void {
  for (const child of children) child.kill("SIGKILL");
  children.clear();
}
process.once("exit", killChildren);
// Vitest ends its workers with SIGTERM, which skips "exit": clean up, then die of the signal.
process.once("SIGTERM", () => {
  killChildren();
  process.kill(process.pid, "SIGTERM");
});

export interface ExitStatus {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** One gateway or counter node: a node id, a port and an environment that stay the same across restarts. */
export class ClusterProcess {
  #child: ChildProcess | undefined;
  #exited: Promise<ExitStatus> = Promise.resolve({ code: null, signal: null });
  #paused = false;
  #starts = 0;

  constructor(
    readonly kind: ProcessKind,
    readonly nodeId: string,
    readonly port: number,
    readonly env: Readonly<Record<string, string>>,
    readonly logPath: string,
  ) {}

  get url(): string {
    return `http://${LOOPBACK}:${this.port}`;
  }

  get wsUrl(): string {
    return `ws://${LOOPBACK}:${this.port}/ws`;
  }

  get running(): boolean {
    return this.#child !== undefined;
  }

  get paused(): boolean {
    return this.#paused;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Incarnations started so far: what runs now is incarnation number `starts`. */
  get starts(): number {
    return this.#starts;
  }

  /** Resolves when the current incarnation exits (at once when none runs). */
  get exited(): Promise<ExitStatus> {
    return this.#exited;
  }

  /** Spawns the process (again, with the same environment) and waits until /readyz says ready. */
  async start(): Promise<void> {
    this.spawn();
    await this.waitReady();
  }

  /** Spawns the process (again, with the same environment) without waiting for it to be ready. */
  spawn(): void {
    if (this.#child !== undefined) throw new Error(`${this.nodeId} is already running`);
    const fd = openSync(this.logPath, "a");
    writeSync(fd, `--- ${this.nodeId} start #${++this.#starts} at ${new Date().toISOString()} ---\n`);
    // As deployed (infra/k8s): the counter node with a larger young generation and old-space start.
    const flags = this.kind === "counter" ? ["--max-semi-space-size=32", "--initial-old-space-size=128"] : [];
    const child = spawn(process.execPath, ["--enable-source-maps", ...flags, ENTRY[this.kind]], {
      env: this.env,
      stdio: ["ignore", fd, fd],
    });
    closeSync(fd);
    this.#child = child;
    this.#paused = false;
    children.add(child);
    this.#exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        children.delete(child);
        if (this.#child === child) {
          this.#child = undefined;
          this.#paused = false;
        }
        resolve({ code, signal });
      });
    });
  }

  /** Polls /readyz until it answers 200; fails at once if the process exits meanwhile. */
  async waitReady(timeoutMs = READY_TIMEOUT_MS): Promise<void> {
    await eventually(
      async () => {
        if (this.#child === undefined) throw new ExitedError(`${this.nodeId} exited:\n${this.logTail(40)}`);
        const res = await fetch(`${this.url}/readyz`);
        if (res.status !== 200) throw new Error(`${this.nodeId} /readyz answered ${res.status}`);
      },
      { timeoutMs, intervalMs: 50, message: `${this.nodeId} ready` },
    ).catch((err: unknown) => {
      throw err instanceof Error && err.cause instanceof ExitedError ? err.cause : err;
    });
  }

  /** A crash: SIGKILL, no shutdown work. */
  async kill(): Promise<void> {
    this.#child?.kill("SIGKILL");
    await this.#exited;
  }

  /** Freezes the process: its sockets stay open, it answers nothing and its timers stop. */
  pause(): void {
    if (this.#child === undefined || this.#paused) return;
    this.#child.kill("SIGSTOP");
    this.#paused = true;
  }

  resume(): void {
    if (this.#child === undefined || !this.#paused) return;
    this.#child.kill("SIGCONT");
    this.#paused = false;
  }

  /** Graceful stop: SIGTERM, then the exit status; SIGKILL and an error if it does not exit in time. */
  async terminate(timeoutMs = STOP_TIMEOUT_MS): Promise<ExitStatus> {
    const child = this.#child;
    if (child === undefined) return this.#exited;
    child.kill("SIGTERM");
    this.resume();
    const timedOut = Symbol("timed out");
    const status = await Promise.race([this.#exited, sleep(timeoutMs).then(() => timedOut)]);
    if (status !== timedOut) return status as ExitStatus;
    await this.kill();
    throw new Error(`${this.nodeId} did not exit within ${timeoutMs} ms of SIGTERM:\n${this.logTail(40)}`);
  }

  /** Every incarnation's output so far. */
  log(): string {
    return existsSync(this.logPath) ? readFileSync(this.logPath, "utf8") : "";
  }

  logTail(lines = LOG_TAIL_LINES): string {
    return this.log().trimEnd().split("\n").slice(-lines).join("\n");
  }

  /** The Prometheus text of /metrics. */
  async metricsText(): Promise<string> {
    const res = await fetch(`${this.url}/metrics`, { headers: OPERATOR_HEADERS });
    if (res.status !== 200) throw new Error(`${this.nodeId} /metrics answered ${res.status}`);
    return res.text();
  }

  /**
   * The value of one sample, e.g. `metric("livecount_counter_increments_total", 'outcome="stale"')`;
   * 0 when the sample is absent (a counter never incremented).
   */
  async metric(name: string, labels?: string): Promise<number> {
    const series = labels === undefined ? name : `${name}{${labels}}`;
    for (const line of (await this.metricsText()).split("\n")) {
      if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
    }
    return 0;
  }
}

class ExitedError extends Error {
  override name = "ExitedError";
}
