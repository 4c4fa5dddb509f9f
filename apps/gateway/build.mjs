// Bundles a process entry (emitted by the root `tsc -b`) and what it imports into one file: here
// the gateway process, dist/gateway_process.js -> dist/main.js, the entry every deployment runs
// (apps/standalone/build.mjs does the same for the standalone process). A restarted gateway's
// viewers wait while it starts: loading some 200 modules one by one (resolving, reading and
// compiling each, ESM and CommonJS) cost about three times the CPU of one bundle, and on a busy
// machine that CPU time is stretched into seconds. Native addons stay outside.
import { build } from "esbuild";
import { argv } from "node:process";
import { fileURLToPath } from "node:url";

/** Bundles `entry` into `outfile` (absolute paths) as an ES module for Node 20. */
export async function bundleProcess(entry, outfile) {
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    // uWebSockets.js and msgpackr's optional extractor load native binaries from their packages.
    external: ["uWebSockets.js", "msgpackr-extract"],
    // Bundled CommonJS packages call require() for Node's built-in modules.
    banner: {
      js: 'import { createRequire as __lcRequire } from "node:module"; const require = __lcRequire(import.meta.url);',
    },
    sourcemap: "linked",
    legalComments: "none",
    logLevel: "warning",
  });
}

if (argv[1] === fileURLToPath(import.meta.url)) {
  const here = (path) => fileURLToPath(new URL(path, import.meta.url));
  await bundleProcess(here("dist/gateway_process.js"), here("dist/main.js"));
}
