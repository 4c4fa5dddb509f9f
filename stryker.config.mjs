// @ts-check
/**
 * Mutation testing of the pure core and the counter node's pure units (`npm run test:mutation`).
 * What is mutated and why, how long a run takes and the scores: docs/testing.md ("Mutation testing").
 *
 * @type {import("@stryker-mutator/api/core").PartialStrykerOptions}
 */
export default {
  testRunner: "vitest",
  vitest: { configFile: "vitest.mutation.config.ts" },
  // Only the tests that cover a mutant run against it.
  coverageAnalysis: "perTest",
  mutate: [
    "packages/crdt/src/**/*.ts",
    "packages/ring/src/**/*.ts",
    "packages/protocol/src/**/*.ts",
    "packages/cluster/src/**/*.ts",
    "packages/runtime/src/**/*.ts",
    // I/O glue, exercised by the process tests (test/cluster): connecting to NATS or Redis, and
    // exiting the process on a signal.
    "!packages/cluster/src/adapters.ts",
    "!packages/runtime/src/shutdown.ts",
    // The counter node's units that are pure logic: state in, state or decisions out, time as an
    // argument or through the injected Clock.
    "apps/counter/src/page_presence.ts",
    "apps/counter/src/exchanges.ts",
    "apps/counter/src/increment_batch.ts",
    "apps/counter/src/reset_batch.ts",
    "apps/counter/src/replies.ts",
  ],
  // Static mutants (module-level constants: error tables, regular expressions) can only be tested by
  // reloading every module and running every test, which would double a run. They are left out of
  // the score; `npm run test:mutation -- --ignoreStatic false` tests them too.
  ignoreStatic: true,
  // Two cores, shared with whoever else works on this machine.
  concurrency: 2,
  // The sandboxes go under .tmp (ignored by git, eslint and prettier), not a new top-level directory.
  tempDirName: ".tmp/stryker",
  ignorePatterns: ["/.tmp", "**/dist", "/docs", "/infra", "/loadtest", "/coverage", "/test-results"],
  reporters: ["clear-text", "html", "json", "progress"],
  htmlReporter: { fileName: "reports/mutation/index.html" },
  jsonReporter: { fileName: "reports/mutation/mutation.json" },
  clearTextReporter: { allowColor: false, logTests: false },
  // `npm run test:mutation -- --incremental` reuses this (local, gitignored) file of the last run.
  incrementalFile: "reports/mutation/stryker-incremental.json",
  thresholds: { high: 90, low: 85, break: 85 },
};
