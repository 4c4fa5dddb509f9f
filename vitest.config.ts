import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * The clusters of real processes (counter nodes, gateways, NATS, Redis), most of whose tests hold
 * the product to times: a takeover within its leases, a heal within its follow-ups. Those run one
 * file at a time: two at once, a takeover once missed its bound by CPU alone. `npm test`
 * (test/run.mjs) runs them in a vitest run of their own, beside the other projects' run at the
 * lowest CPU priority; `vitest run` alone runs them last.
 */
const PROCESS_CLUSTERS = ["test/cluster/**/*.test.ts", "test/multi_dc/**/*.test.ts"];

/**
 * Clusters whose tests bound nothing by a lease: a resource limit, or convergence within a generous
 * 15 s. They run two at a time, after the rest and before the clusters held to times.
 */
const UNTIMED_CLUSTERS = [
  "test/cluster/unknown_pages.test.ts",
  "test/cluster/redis_cluster.test.ts",
  "test/cluster/crowded_partition.test.ts",
  "test/multi_dc/tombstone_purge.test.ts",
  "test/multi_dc/three_dcs.test.ts",
  "test/multi_dc/rebuilt_dc.test.ts",
  "test/multi_dc/rebuilt_beside_new_dc.test.ts",
  "test/multi_dc/beyond_presence.test.ts",
  "test/multi_dc/idempotency_across_dcs.test.ts",
  "test/multi_dc/idempotency_across_dcs_cluster.test.ts",
];

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
          // Files share their worker's modules instead of importing them afresh each: on two cores
          // the imports were a third of the project's time (265 s isolated, 196 s not, one run
          // each). It holds because no test mocks a module, stubs a global or an environment
          // variable, or fakes timers (time comes through an injected Clock), metrics go to
          // registries of their own, and ports come from one allocator per process (ports.ts).
          isolate: false,
        },
      },
      {
        extends: true,
        // After the rest (groups run in order), two files at a time.
        test: {
          name: "untimed clusters",
          include: UNTIMED_CLUSTERS,
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        // Last, one file at a time.
        test: {
          name: "clusters",
          include: PROCESS_CLUSTERS,
          exclude: [...configDefaults.exclude, ...UNTIMED_CLUSTERS],
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
