/**
 * TLS: with LIVECOUNT_TLS_CERT_FILE / LIVECOUNT_TLS_KEY_FILE the gateway serves https and wss
 * itself. The certificate is made in the test (openssl, self-signed for 127.0.0.1) and trusted by
 * the clients, so the handshake is checked for real, not skipped.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, expect, test } from "vitest";
import { TestPlatform } from "../../../test/support/platform.js";
import { describeWithBinary } from "../../../test/support/binaries.js";

const OPENSSL = "/usr/bin/openssl";

describeWithBinary(existsSync(OPENSSL), `${OPENSSL} is missing`, "gateway - TLS", () => {
  let dir: string;
  let cert: string;
  let platform: TestPlatform;
  let fetchTls: typeof globalThis.fetch;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "lc-tls-"));
    const certFile = join(dir, "cert.pem");
    const keyFile = join(dir, "key.pem");
    execFileSync(
      OPENSSL,
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        keyFile,
        "-out",
        certFile,
        "-days",
        "1",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
      ],
      { stdio: "ignore" },
    );
    cert = readFileSync(certFile, "utf8");
    const dispatcher = new Agent({ connect: { ca: cert } });
    fetchTls = ((url: string, init?: RequestInit) =>
      undiciFetch(url, { ...(init as object), dispatcher })) as unknown as typeof globalThis.fetch;
    platform = await TestPlatform.start(
      { LIVECOUNT_TLS_CERT_FILE: certFile, LIVECOUNT_TLS_KEY_FILE: keyFile },
      fetchTls,
    );
  });

  afterAll(async () => {
    await platform?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("tls - serves https with the configured certificate, which a client trusting it verifies", async () => {
    expect(platform.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetchTls(`${platform.url}/v1/pages/tls-page/counter`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ page: "tls-page", viewers: 0 });
    // A client that does not trust the certificate is refused by its own TLS stack.
    await expect(fetch(`${platform.url}/healthz`)).rejects.toThrow();
  });

  test("tls - serves wss: a socket joins and gets its count over TLS", async () => {
    expect(platform.wsUrl).toMatch(/^wss:/);
    const client = await platform.connect({ ca: cert });
    client.join("tls-page", "tls-viewer");
    await client.waitForViewers("tls-page", 1);
  });

  test("tls - plain http on the TLS port gets no HTTP answer", async () => {
    const outcome = await new Promise<string>((resolve) => {
      const req = request(
        { host: "127.0.0.1", port: platform.app.port, path: "/healthz", timeout: 3000 },
        (res) => resolve(`answered ${res.statusCode}`),
      );
      req.on("error", () => resolve("refused"));
      req.on("timeout", () => {
        req.destroy();
        resolve("refused");
      });
      req.end();
    });
    expect(outcome).toBe("refused");
  });
});
