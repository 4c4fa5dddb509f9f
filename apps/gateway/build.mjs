// Bundles the gateway process (dist/gateway_process.js, emitted by the root `tsc -b`) and what it
// imports into one file, dist/main.js, the entry every deployment runs. A restarted gateway's
// viewers wait while it starts: loading some 200 modules one by one (resolving, reading and
// compiling each, ESM and CommonJS) cost about three times the CPU of one bundle, and on a busy
// machine that CPU time is stretched into seconds. Native addons stay outside.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

await build({
  entryPoints: [here("dist/gateway_process.js")],
  outfile: here("dist/main.js"),
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
