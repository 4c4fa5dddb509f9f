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
    reporters: ["default"],
  },
});
