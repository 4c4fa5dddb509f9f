/**
 * Runs a TypeScript entry point in a child Node process, built from the workspace sources (the
 * "source" export condition) with esbuild, so tests that need a process of their own never run a
 * stale build. Workspace packages are bundled; every other import stays external and resolves from
 * the repository root, because the bundle is fed to node on stdin with the root as its directory.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { build, type Plugin } from "esbuild";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Bare imports other than workspace packages (node builtins, ws, uWebSockets.js, ...) stay imports. */
const externalDependencies: Plugin = {
  name: "external-dependencies",
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, (args) =>
      args.path.startsWith("@livecount/") ? undefined : { path: args.path, external: true },
    );
  },
};

export interface ScriptResult {
  /** Exit code, or null when killed by a signal. */
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  /** True when the process had to be killed because it did not exit within the deadline. */
  readonly timedOut: boolean;
}

/** Bundles `entry` (an absolute path) as an ES module. */
export async function bundle(entry: string): Promise<string> {
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    conditions: ["source"],
    plugins: [externalDependencies],
    write: false,
    logLevel: "silent",
  });
  return result.outputFiles[0]!.text;
}

/**
 * Runs `entry` in a fresh node process and waits for it to exit by itself; kills it after
 * `timeoutMs` and reports `timedOut`. `onStdout` sees output as it arrives.
 */
export async function runScript(
  entry: string,
  options: { timeoutMs: number; env?: NodeJS.ProcessEnv; onStdout?: (text: string) => void },
): Promise<ScriptResult> {
  const code = await bundle(entry);
  const child = spawn(process.execPath, ["--input-type=module"], {
    cwd: ROOT,
    env: options.env ?? process.env,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    options.onStdout?.(stdout);
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  child.stdin.end(code);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, options.timeoutMs);
  const [exitCode, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.once("exit", (c, s) => resolve([c, s])),
  );
  clearTimeout(timer);
  return { code: exitCode, signal, stdout, stderr, timedOut };
}
