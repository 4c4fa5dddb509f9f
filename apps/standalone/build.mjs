// Bundles the standalone process (dist/standalone_process.js, emitted by the root `tsc -b`) into
// dist/main.js, what `npm start` runs: see apps/gateway/build.mjs for why.
import { fileURLToPath } from "node:url";
import { bundleProcess } from "../gateway/build.mjs";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
await bundleProcess(here("dist/standalone_process.js"), here("dist/main.js"));
