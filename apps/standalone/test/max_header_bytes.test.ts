/**
 * LIVECOUNT_MAX_HEADER_BYTES set away from its default reaches uWebSockets.js, which reads it once
 * when it loads (apps/gateway/src/uws.ts): a process started with it serves request heads of
 * exactly that many bytes, reads and WebSocket upgrades alike, and answers one byte more with 431.
 * The default is held in-process by apps/gateway/test/http_budget.test.ts.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { freePort } from "../../../test/support/ports.js";
import { PADDED_GET, PADDED_UPGRADE, headOf } from "../../../test/support/request_heads.js";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const HEADER_BYTES = 16 * 1024;

/** The status code of the answer to `head`, sent on a connection of its own. */
function statusOf(port: number, head: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: "127.0.0.1" }, () => socket.write(head));
    let text = "";
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString("latin1");
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(text);
      if (status !== null) {
        resolve(Number(status[1]));
        socket.destroy();
      }
    });
    socket.on("error", reject);
    socket.on("close", () => reject(new Error(`closed without an answer: ${JSON.stringify(text)}`)));
  });
}

describe("LIVECOUNT_MAX_HEADER_BYTES - npm start's process with 16 KiB", () => {
  let child: ChildProcess;
  let port: number;

  beforeAll(async () => {
    port = await freePort();
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LIVECOUNT_")));
    child = spawn(process.execPath, [MAIN], {
      env: {
        ...base,
        LIVECOUNT_PORT: String(port),
        LIVECOUNT_HOST: "127.0.0.1",
        LIVECOUNT_LOG_LEVEL: "warn",
        LIVECOUNT_MAX_HEADER_BYTES: String(HEADER_BYTES),
      },
      stdio: "ignore",
    });
    await eventually(async () => expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200), {
      timeoutMs: 20_000,
    });
  });

  afterAll(async () => {
    if (child?.exitCode === null) {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
  });

  test("a read whose head is exactly the setting is served; one byte more gets 431", async () => {
    expect(await statusOf(port, headOf(HEADER_BYTES, PADDED_GET))).toBe(200);
    expect(await statusOf(port, headOf(HEADER_BYTES + 1, PADDED_GET))).toBe(431);
  });

  test("an upgrade whose cookies bring its head to exactly the setting is upgraded; one byte more gets 431", async () => {
    expect(await statusOf(port, headOf(HEADER_BYTES, PADDED_UPGRADE))).toBe(101);
    expect(await statusOf(port, headOf(HEADER_BYTES + 1, PADDED_UPGRADE))).toBe(431);
  });
});
