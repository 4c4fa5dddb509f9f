import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = dirname(fileURLToPath(import.meta.url));
const conditions = ["source", "module", "node", "import", "default"];

/**
 * Each workspace package's name -> its TypeScript entry (the "source" export condition), inside the
 * directory this config sits in. Stryker runs the tests in a sandbox copy of the repository whose
 * node_modules is a link to the real one, and the workspace links in there lead back to the real,
 * unmutated sources: a mutant would then only meet the tests of its own package. Resolving the
 * packages here keeps every test on the sandbox's (mutated) code.
 */
function workspaceSources(): Record<string, string> {
  const sources: Record<string, string> = {};
  for (const group of ["packages", "apps"]) {
    for (const dir of readdirSync(join(root, group))) {
      const manifest = JSON.parse(readFileSync(join(root, group, dir, "package.json"), "utf8")) as {
        name: string;
        exports?: { ".": { source?: string } };
      };
      const source = manifest.exports?.["."].source;
      if (source !== undefined) sources[manifest.name] = join(root, group, dir, source);
    }
  }
  return sources;
}

const alias = Object.entries(workspaceSources()).map(([name, source]) => ({
  find: new RegExp(`^${name.replace("/", "\\/")}$`),
  replacement: source,
}));

/**
 * The tests `npm run test:mutation` (StrykerJS) runs against each mutant: the unit tests of the
 * mutated code, all in-process with manual clocks and in-memory adapters. No global setup: nothing
 * here spawns a process, so nothing needs a build. See docs/testing.md ("Mutation testing").
 */
export default defineConfig({
  resolve: { alias, conditions },
  ssr: { resolve: { conditions } },
  test: {
    include: [
      "packages/crdt/test/**/*.test.ts",
      "packages/ring/test/**/*.test.ts",
      "packages/protocol/test/**/*.test.ts",
      "packages/cluster/test/**/*.test.ts",
      "packages/runtime/test/**/*.test.ts",
      "apps/counter/test/**/*.test.ts",
    ],
    // The ops server's test listens on a real port and covers nothing that is mutated.
    exclude: ["apps/counter/test/ops_server.test.ts", "**/node_modules/**"],
    // Instrumented code runs many times slower while Stryker measures which test covers what (the
    // initial run): the ring's statistical tests need more than the usual 30 s then. A mutant that
    // loops forever is stopped by Stryker's own timeout, derived from that initial run.
    testTimeout: 300_000,
    pool: "forks",
    reporters: ["default"],
  },
});
