import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

// Workspace packages resolve to their TypeScript sources through the "source" export condition,
// so tests never run against a stale build. Tests that spawn real processes use the build made
// by the global setup.
export default defineConfig({
  resolve: { conditions: ["source", "module", "node", "import", "default"] },
  ssr: { resolve: { conditions: ["source", "module", "node", "import", "default"] } },
  test: {
    include: ["packages/*/test/**/*.test.ts", "apps/*/test/**/*.test.ts", "test/**/*.test.ts"],
    globalSetup: ["test/support/global_setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Most of the suite's time is spent waiting on real processes (leases, grace windows, restarts):
    // with one worker (the default on two cores) the cores were a third busy. Two workers at least
    // halve the wall time; ports come from a slice per worker (test/support/ports.ts).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    reporters: ["default"],
  },
});
