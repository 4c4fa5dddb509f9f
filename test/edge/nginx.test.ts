/**
 * The gateway behind nginx, as infra/nginx/livecount.conf ships it: sockets, event streams and the
 * HTTP API through a real nginx, each client counted as itself (X-Forwarded-For), a keyed change
 * that met a failing gateway sent on to the next and counted once, an unkeyed one never sent again,
 * the client's Host with its port. The "failing gateway" is a TCP server that reads a request and
 * drops the connection, as a gateway killed while serving it would.
 */
import { createServer, connect, type Server } from "node:net";
import { afterAll, beforeAll, expect, test } from "vitest";
import { Nginx, describeWithNginx } from "../support/nginx.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../support/platform.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { SseClient } from "../support/sse_client.js";
import { TestClient } from "../support/ws_client.js";

const PER_IP = 2;

describeWithNginx("nginx in front of gateways (infra/nginx/livecount.conf)", () => {
  let platform: TestPlatform;
  let dying: Server;
  let nginx: Nginx;
  /** Requests the failing gateway read before dropping their connections. */
  let dropped = 0;
  const clients: TestClient[] = [];

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_DEMO: "1",
      LIVECOUNT_TRUSTED_PROXIES: "127.0.0.1",
      LIVECOUNT_MAX_CONNECTIONS_PER_IP: String(PER_IP),
    });
    dying = createServer((socket) => {
      socket.once("data", () => {
        dropped++;
        socket.destroy();
      });
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => dying.listen(0, "127.0.0.1", resolve));
    const dyingPort = (dying.address() as { port: number }).port;
    // max_fails=0: nginx keeps choosing the failing gateway, so every test meets it.
    nginx = await Nginx.start([`127.0.0.1:${dyingPort} max_fails=0`, `127.0.0.1:${platform.app.port}`]);
  });

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await nginx?.stop();
    await new Promise((resolve) => dying?.close(resolve));
    await platform?.close();
  });

  const open = async (localAddress: string, headers?: Record<string, string>): Promise<TestClient> => {
    const client = await TestClient.connect(nginx.wsUrl, { localAddress, ...(headers ? { headers } : {}) });
    clients.push(client);
    return client;
  };

  test("sockets and event streams work through it: a join shows on a stream at once", async () => {
    const stream = await SseClient.open(`${nginx.url}/v1/pages/proxied/events`, {
      localAddress: "127.0.0.4",
    });
    expect(stream.status).toBe(200);
    await stream.nextCount((f) => f.viewers === 0);
    const viewer = await open("127.0.0.5");
    viewer.join("proxied", "v1");
    // Buffered by nginx, the frame would wait for the buffer to fill; it comes as the gateway sends it.
    await stream.nextCount((f) => f.viewers === 1);
    await viewer.next((f) => f.type === "count" && f.page === "proxied" && f.viewers === 1);
    stream.close();
    await viewer.close();
  });

  test("each client is counted as itself: its own per-address quota, whatever X-Forwarded-For it writes", async () => {
    const held = [await open("127.0.0.2"), await open("127.0.0.2")];
    // Past its quota; a forged header changes nothing, since nginx appends the address it saw.
    for (const headers of [undefined, { "x-forwarded-for": "198.51.100.1" }]) {
      const refused = await TestClient.connect(nginx.wsUrl, {
        localAddress: "127.0.0.2",
        ...(headers ? { headers } : {}),
      }).then(
        () => "opened",
        (err: Error) => err.message,
      );
      expect(refused).toMatch(/429/);
    }
    // Another client behind the same nginx is not affected.
    const other = await open("127.0.0.3");
    await other.ping();
    await Promise.all([...held, other].map((c) => c.close()));
  });

  test("a change with a key meeting a failing gateway goes on to the next and counts once; one without a key is not sent again", async () => {
    const publisher = new PublisherHttp(nginx.url, TEST_PUBLISHER_KEY);
    const LIKES = 8;
    let before = dropped;
    for (let i = 0; i < LIKES; i++)
      expect((await publisher.change("keyed", "likes", 1, `like-${i}`)).status).toBe(200);
    // Some met the failing gateway (which read them), and nginx sent them on: the owner answers the
    // second as the first if it came that far.
    expect(dropped - before).toBeGreaterThan(0);
    expect((await platform.counter("keyed")).counters.likes).toBe(LIKES);

    // Without a key the gateway makes one up for each request, so a second sending would count twice.
    before = dropped;
    let answered = 0;
    for (let i = 0; i < LIKES; i++) {
      const res = await publisher.request("PUT", "/v1/pages/unkeyed/counter", {
        body: { action: "increment", counter: "likes", by: 1 },
      });
      if (res.status === 200) answered++;
      else expect(res.status).toBe(502);
    }
    expect(LIKES - answered).toBe(dropped - before);
    expect(answered).toBeLessThan(LIKES);
    expect((await platform.counter("unkeyed")).counters.likes ?? 0).toBe(answered);
    // A read meeting the failing gateway is tried on the next: none fails.
    for (let i = 0; i < 6; i++) expect((await fetch(`${nginx.url}/v1/pages/keyed/counter`)).status).toBe(200);
  });

  test("the gateway sees the client's Host with its port: the demo page's same-origin check passes", async () => {
    const like = (origin = nginx.url): Promise<Response> =>
      fetch(`${nginx.url}/demo/like`, {
        method: "POST",
        headers: { origin, "content-type": "application/json" },
      });
    let res = await like();
    // A change without a key: meeting the failing gateway it is answered 502, not sent on.
    for (let retry = 0; res.status === 502 && retry < 10; retry++) res = await like();
    expect(res.status).toBe(200);
    // Another port is another origin: refused (or, meeting the failing gateway, 502).
    let other = await like("http://127.0.0.1:1");
    for (let retry = 0; other.status === 502 && retry < 10; retry++) other = await like("http://127.0.0.1:1");
    expect(other.status).toBe(403);
  });

  test("an HTTP/1.0 client reaches the gateway, which speaks HTTP/1.1 only: nginx talks 1.1 to it", async () => {
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect({ host: "127.0.0.1", port: nginx.port });
      let text = "";
      socket.on("data", (d: Buffer) => (text += d.toString("latin1")));
      socket.once("close", () => resolve(text));
      socket.once("error", reject);
      socket.write("GET /healthz HTTP/1.0\r\n\r\n");
    });
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).toContain('{"status":"ok"}');
  });
});
