import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * The clusters of real processes (counter nodes, gateways, NATS, Redis) whose tests hold the
 * product to times: a takeover within its leases, a heal within its follow-ups. They run one file
 * at a time, as they always have, with the machine to themselves.
 */
const PROCESS_CLUSTERS = ["test/cluster/**/*.test.ts", "test/multi_dc/**/*.test.ts"];

// Workspace packages resolve to their TypeScript sources through the "source" export condition,
// so tests never run against a stale build. Tests that spawn real processes use the build made
// by the global setup.
export default defineConfig({
  resolve: { conditions: ["source", "module", "node", "import", "default"] },
  ssr: { resolve: { conditions: ["source", "module", "node", "import", "default"] } },
  test: {
    globalSetup: ["test/support/global_setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    reporters: ["default"],
    projects: [
      {
        extends: true,
        test: {
          name: "suite",
          include: ["packages/*/test/**/*.test.ts", "apps/*/test/**/*.test.ts", "test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, ...PROCESS_CLUSTERS],
          // Most of these wait on processes and sockets rather than compute: with one worker (the
          // default on two cores) the cores were a third busy. Two at least; ports come from a
          // slice per worker (test/support/ports.ts).
          maxWorkers: Math.max(2, availableParallelism() - 1),
        },
      },
      {
        extends: true,
        // After the rest (groups run in order), one file at a time.
        test: { name: "clusters", include: PROCESS_CLUSTERS, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
