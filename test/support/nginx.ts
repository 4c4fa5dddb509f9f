/**
 * Runs a real nginx for tests in front of gateways: `infra/nginx/livecount.conf` as shipped, its
 * `listen` line and upstream servers rewritten to a free port and the test's gateways, inside a
 * minimal main configuration of its own temp dir (one worker, no daemon, logs and temp files there).
 *
 * The binary comes from LIVECOUNT_NGINX, else PATH, else /usr/sbin/nginx. Without one, suites wrapped
 * in `describeWithNginx` are skipped with a warning, except under CI where a missing nginx is an error.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describeWithBinary, findBinary } from "./binaries.js";
import { eventually } from "./eventually.js";
import { freePort, LOOPBACK } from "./ports.js";

const SHIPPED = fileURLToPath(new URL("../../infra/nginx/livecount.conf", import.meta.url));
const FALLBACK_BINARY = "/usr/sbin/nginx";
const READY_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 5_000;

export function nginxBinary(): string | undefined {
  return findBinary("nginx", "LIVECOUNT_NGINX", FALLBACK_BINARY);
}

/** `describe` for suites that need nginx: skipped loudly without it, failed under CI. */
export function describeWithNginx(name: string, fn: () => void): void {
  describeWithBinary(
    nginxBinary() !== undefined,
    "nginx not found (set LIVECOUNT_NGINX or install it)",
    name,
    fn,
  );
}

/** An upstream server line's address and parameters, as `host:port [max_fails=0 ...]`. */
export type UpstreamServer = string;

/**
 * The shipped configuration with `listen` and the upstream's `server` lines replaced. Throws when
 * the file no longer has the lines this rewrites, so a change to its shape cannot go untested.
 */
export function renderConfig(port: number, upstreams: readonly UpstreamServer[]): string {
  const shipped = readFileSync(SHIPPED, "utf8");
  const servers = /^( +)server \d+\.\d+\.\d+\.\d+:\d+;\n(?:\1server \d+\.\d+\.\d+\.\d+:\d+;\n)*/m;
  const listen = /^( +)listen 80;$/m;
  if (!servers.test(shipped) || !listen.test(shipped))
    throw new Error(`${SHIPPED} lost its "server a.b.c.d:port;" or "listen 80;" lines`);
  return shipped
    .replace(servers, (_m, indent: string) => upstreams.map((u) => `${indent}server ${u};\n`).join(""))
    .replace(listen, (_m, indent: string) => `${indent}listen ${LOOPBACK}:${port};`);
}

export class Nginx {
  #exited: Promise<void>;
  #log = "";

  private constructor(
    readonly port: number,
    readonly dir: string,
    readonly child: ChildProcess,
  ) {
    this.#exited = new Promise((resolve) => child.once("exit", () => resolve()));
    child.stderr?.on("data", (d: Buffer) => (this.#log += d.toString("utf8")));
  }

  get url(): string {
    return `http://${LOOPBACK}:${this.port}`;
  }

  get wsUrl(): string {
    return `ws://${LOOPBACK}:${this.port}/ws`;
  }

  /** Starts nginx in front of `upstreams` and resolves once it accepts connections. */
  static async start(upstreams: readonly UpstreamServer[]): Promise<Nginx> {
    const binary = nginxBinary();
    if (binary === undefined) throw new Error("nginx not found (set LIVECOUNT_NGINX)");
    const dir = mkdtempSync(join(tmpdir(), "livecount-nginx-"));
    const port = await freePort();
    writeFileSync(join(dir, "livecount.conf"), renderConfig(port, upstreams));
    writeFileSync(
      join(dir, "nginx.conf"),
      [
        "daemon off;",
        "worker_processes 1;",
        `pid ${join(dir, "nginx.pid")};`,
        `error_log ${join(dir, "error.log")} warn;`,
        "events { worker_connections 1024; }",
        "http {",
        "  access_log off;",
        ...["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map(
          (t) => `  ${t}_temp_path ${join(dir, t)};`,
        ),
        `  include ${join(dir, "livecount.conf")};`,
        "}",
        "",
      ].join("\n"),
    );
    const child = spawn(binary, ["-p", dir, "-e", join(dir, "error.log"), "-c", join(dir, "nginx.conf")], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    const nginx = new Nginx(port, dir, child);
    try {
      await eventually(() => nginx.#accepts(), { timeoutMs: READY_TIMEOUT_MS, intervalMs: 25 });
    } catch (err) {
      await nginx.stop();
      throw new Error(`nginx did not start: ${nginx.#log}${nginx.errorLog()}`, { cause: err });
    }
    return nginx;
  }

  /** nginx's error log so far (upstream failures are logged there). */
  errorLog(): string {
    try {
      return readFileSync(join(this.dir, "error.log"), "utf8");
    } catch {
      return "";
    }
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      // TERM is nginx's fast stop: it closes every connection at once. (QUIT, the graceful one,
      // waits for proxied sockets to end, as a reload's old workers do.)
      this.child.kill("SIGTERM");
      const timer = setTimeout(() => this.child.kill("SIGKILL"), STOP_GRACE_MS);
      await this.#exited;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  async #accepts(): Promise<void> {
    if (this.child.exitCode !== null) throw new Error(`nginx exited: ${this.#log}`);
    await new Promise<void>((resolve, reject) => {
      const socket = createConnection({ host: LOOPBACK, port: this.port }, () => {
        socket.destroy();
        resolve();
      });
      socket.once("error", reject);
    });
  }
}
