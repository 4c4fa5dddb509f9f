import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * Builds every workspace once so tests that spawn real processes (gateways, counter nodes) run the
 * current code. LIVECOUNT_TEST_SKIP_BUILD=1 skips it for focused runs of in-process tests.
 */
export default function setup(): void {
  if (process.env.LIVECOUNT_TEST_SKIP_BUILD === "1") return;
  execFileSync("npm", ["run", "build", "--silent"], { cwd: root, stdio: "inherit" });
}
