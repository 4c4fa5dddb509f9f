import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { describeWithNats, NatsServer, startNatsCluster } from "../../../test/support/nats_server.js";
import { freePorts, LOOPBACK } from "../../../test/support/ports.js";
import {
  BusDisconnectedError,
  BusError,
  BusTimeoutError,
  NatsBus,
  PayloadTooLargeError,
  ResponderError,
  pageSubject,
  type Bus,
} from "../src/index.js";
import { busContract, bytes, record, text, waitFor } from "./bus_contract.js";

const repoRoot = fileURLToPath(new URL("../../..", import.meta.url));

/** Quick reconnects keep the outage tests short. */
const TEST_RECONNECT_TIME_WAIT_MS = 50;
/** Well below the client ping interval, so the paused server is not given up on meanwhile. */
const PAUSED_TIMEOUT_MS = 300;
/** A server's max_payload small enough to pass in a test (NATS's default is 1 MiB). */
const SMALL_MAX_PAYLOAD = 4096;

describeWithNats("NatsBus", () => {
  let server: NatsServer;
  const buses: Bus[] = [];

  const connect = async (name: string): Promise<NatsBus> => {
    const bus = await NatsBus.connect({
      servers: server.url,
      name,
      reconnectTimeWaitMs: TEST_RECONNECT_TIME_WAIT_MS,
    });
    buses.push(bus);
    return bus;
  };

  beforeAll(async () => {
    server = await NatsServer.start();
  });

  afterEach(async () => {
    await Promise.all(buses.splice(0).map((b) => b.close()));
  });

  afterAll(async () => {
    await server?.stop();
  });

  busContract("NatsBus", async () => ({ sub: await connect("sub"), pub: await connect("pub") }));

  it("with noEcho, a connection gets what others publish on a subject, never what it publishes itself", async () => {
    const quiet = await NatsBus.connect({ servers: server.url, name: "quiet", noEcho: true });
    buses.push(quiet);
    const other = await connect("other");
    const { got } = record(quiet, "t.echo");
    const { got: seenByOther } = record(other, "t.echo");
    await quiet.flush();
    await other.flush();
    quiet.publish("t.echo", bytes("mine"));
    other.publish("t.echo", bytes("theirs"));
    await waitFor("both messages", () => seenByOther.length === 2 && got.length === 1);
    await quiet.flush();
    await other.flush();
    expect(got).toEqual(["t.echo theirs"]);
    expect([...seenByOther].sort()).toEqual(["t.echo mine", "t.echo theirs"]);
  });

  it("fails to connect with BusError when no server listens", async () => {
    const stopped = await NatsServer.start();
    const url = stopped.url;
    await stopped.stop();
    await expect(NatsBus.connect({ servers: url })).rejects.toThrow(BusError);
    // The error names the servers, without the credentials an address may carry.
    const withSecret = url.replace("nats://", "nats://user:s3cret@");
    const err = await NatsBus.connect({ servers: [withSecret, "nats://tok3n@127.0.0.1:1"] }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BusError);
    expect((err as Error).message).toContain(
      `${url.replace("nats://", "nats://***@")},nats://***@127.0.0.1:1`,
    );
    expect((err as Error).message).not.toMatch(/s3cret|tok3n/);
  });

  it("emits reconnected after a server restart and keeps its subscriptions", async () => {
    const sub = await connect("sub");
    const pub = await connect("pub");
    let reconnects = 0;
    sub.on("reconnected", () => reconnects++);
    const { got } = record(sub, "t.a");
    sub.serve("svc.echo", (data) => data);
    await sub.flush();

    await server.kill();
    await waitFor("the outage to be noticed", () => sub.status === "reconnecting");
    await server.restart();
    await waitFor("the reconnect", () => reconnects === 1 && sub.status === "connected");
    await waitFor("the publisher's reconnect", () => pub.status === "connected");
    await sub.flush();

    pub.publish("t.a", bytes("after"));
    await waitFor("the message", () => got.length === 1);
    expect(got).toEqual(["t.a after"]);
    expect(text(await pub.request("svc.echo", bytes("ok")))).toBe("ok");
  });

  it("refuses a request at once while disconnected, and fails one in flight when the connection drops, instead of timing out", async () => {
    const sub = await connect("sub");
    const pub = await connect("pub");
    // A responder that never answers: the request stays in flight until something fails it.
    sub.serve("svc.never", () => new Promise<Uint8Array>(() => {}));
    sub.serve("svc.echo", (data) => data);
    await sub.flush();
    const timeoutMs = 10_000;
    const inFlight = pub.request("svc.never", bytes("x"), { timeoutMs });
    const inFlightFailed = expect(inFlight).rejects.toThrow(BusDisconnectedError);
    const sentAt = Date.now();

    await server.kill();
    await inFlightFailed;
    await waitFor("the outage to be noticed", () => pub.status === "reconnecting");
    const refusedAt = Date.now();
    await expect(pub.request("svc.echo", bytes("y"), { timeoutMs })).rejects.toThrow(BusDisconnectedError);
    expect(Date.now() - refusedAt, "refused at once, not at its timeout, ms").toBeLessThan(timeoutMs / 2);
    expect(refusedAt - sentAt, "the in-flight request failed long before its timeout, ms").toBeLessThan(
      timeoutMs / 2,
    );

    await server.restart();
    await waitFor("the reconnect", () => pub.status === "connected" && sub.status === "connected");
    await sub.flush();
    expect(text(await pub.request("svc.echo", bytes("again")))).toBe("again");
  });

  it("fails a publish and a reply past the server's max_payload with PayloadTooLargeError, the request at once", async () => {
    const small = await NatsServer.start({ config: `max_payload: ${SMALL_MAX_PAYLOAD}` });
    try {
      const warnings: string[] = [];
      const logger = {
        warn: (_: object, msg: string) => warnings.push(msg),
        error: () => {},
        info: () => {},
      };
      const open = (name: string) =>
        NatsBus.connect({ servers: small.url, name, logger }).then((bus) => (buses.push(bus), bus));
      const [sub, pub] = await Promise.all([open("sub"), open("pub")]);
      expect(pub.maxPayload).toBe(SMALL_MAX_PAYLOAD);
      // Connecting says so: the nodes' messages are sized for the default.
      expect(warnings.filter((w) => w.includes("below its 1 MiB default"))).toHaveLength(2);
      expect((await connect("default")).maxPayload).toBe(1024 * 1024);
      // The largest message the server takes goes; one byte more does not.
      const { got } = record(sub, "t.big");
      sub.serve("svc.sized", (data) => new Uint8Array(Number(text(data))));
      await sub.flush();
      pub.publish("t.big", new Uint8Array(SMALL_MAX_PAYLOAD));
      await waitFor("the largest message", () => got.length === 1);
      expect(() => pub.publish("t.big", new Uint8Array(SMALL_MAX_PAYLOAD + 1))).toThrow(PayloadTooLargeError);
      expect(() => pub.publish("t.big", new Uint8Array(SMALL_MAX_PAYLOAD + 1))).toThrow(
        `${SMALL_MAX_PAYLOAD + 1} bytes, more than the server's max_payload of ${SMALL_MAX_PAYLOAD}`,
      );

      expect((await pub.request("svc.sized", bytes(String(SMALL_MAX_PAYLOAD)))).length).toBe(
        SMALL_MAX_PAYLOAD,
      );
      // A reply nats.js refuses to send was dropped: the requester waited out its timeout (a read of
      // a page whose entries passed it answered 504). It now hears why, at once.
      const timeoutMs = 10_000;
      const sentAt = Date.now();
      const err = await pub
        .request("svc.sized", bytes(String(SMALL_MAX_PAYLOAD + 1)), { timeoutMs })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ResponderError);
      expect((err as Error).message).toContain("PayloadTooLargeError");
      expect((err as Error).message).toContain(`${SMALL_MAX_PAYLOAD + 1} bytes`);
      expect(Date.now() - sentAt, "failed long before its timeout, ms").toBeLessThan(timeoutMs / 2);
      // The connection goes on.
      expect((await pub.request("svc.sized", bytes("3"))).length).toBe(3);
    } finally {
      await small.stop();
    }
  });

  it("times requests out while the server is paused and serves them again once it resumes", async () => {
    const sub = await connect("sub");
    const pub = await connect("pub");
    sub.serve("svc.echo", (data) => data);
    await sub.flush();
    await server.pause();
    try {
      await expect(pub.request("svc.echo", bytes("x"), { timeoutMs: PAUSED_TIMEOUT_MS })).rejects.toThrow(
        BusTimeoutError,
      );
    } finally {
      await server.resume();
    }
    expect(text(await pub.request("svc.echo", bytes("back")))).toBe("back");
  });

  it("delivers page updates between two data centers of a super cluster", async () => {
    const [gw1, gw2] = await freePorts(2);
    const gateway = (name: string, port: number | undefined): string =>
      `gateway { name: ${name}, listen: "${LOOPBACK}:${port}", gateways: [` +
      `{ name: dc1, url: "nats://${LOOPBACK}:${gw1}" }, { name: dc2, url: "nats://${LOOPBACK}:${gw2}" }] }`;
    const dc1 = await NatsServer.start({ name: "dc1", config: gateway("dc1", gw1) });
    const dc2 = await NatsServer.start({ name: "dc2", config: gateway("dc2", gw2) });
    try {
      const east = await NatsBus.connect({ servers: dc1.url });
      const west = await NatsBus.connect({ servers: dc2.url });
      buses.push(east, west);
      const { got } = record(west, pageSubject("a.*", 7));
      const other = record(west, pageSubject("a.b", 7));
      await west.flush();
      // Gateways connect and learn interest asynchronously: publish until the first one crosses.
      await waitFor("a message from dc1", () => {
        east.publish(pageSubject("a.b", 7), bytes("other"));
        east.publish(pageSubject("a.*", 7), bytes("update"));
        return got.length > 0 && other.got.length > 0;
      });
      expect(new Set(got)).toEqual(new Set([`${pageSubject("a.*", 7)} update`]));
    } finally {
      await Promise.all([dc1.stop(), dc2.stop()]);
    }
  });

  it.each([
    ["its address", (server: NatsServer) => server.url],
    // The gossip then names the same server by its address: that entry must not be dialed next.
    ["a DNS name", (server: NatsServer) => `nats://localhost:${server.port}`],
  ])(
    "reconnect() leaves a frozen server, given by %s, for another of its cluster, learnt from the cluster's gossip, at once and with a full socket; after the thaw every message comes once",
    async (_, urlOf) => {
      // Servers that give up soon on a connection that never says CONNECT: a dial left open would
      // come back as a second socket of the connection within the test. Three pings unanswered,
      // not one: at nice 19 beside the timed clusters the test process once stalled past two
      // seconds, and the second server dropped the moved connection for it (a second reconnect).
      const config = 'ping_interval: "1s"\nping_max: 3';
      const [first, second] = (await startNatsCluster(2, config)) as [NatsServer, NatsServer];
      try {
        const options = { reconnectTimeWaitMs: TEST_RECONNECT_TIME_WAIT_MS };
        const moving = await NatsBus.connect({ servers: urlOf(first), name: "moving", ...options });
        const other = await NatsBus.connect({ servers: second.url, name: "other", ...options });
        buses.push(moving, other);
        let reconnects = 0;
        moving.on("reconnected", () => reconnects++);
        const { got } = record(moving, "t.moved");
        moving.serve("svc.moved", (data) => data);
        await moving.flush();
        await first.pause();
        try {
          // Megabytes the frozen server never reads: the socket is full, and a polite disconnect
          // would wait for it forever.
          const chunk = new Uint8Array(64 * 1024);
          for (let i = 0; i < 256; i++) moving.publish("t.bulk", chunk);
          const askedAt = Date.now();
          expect(moving.reconnect()).toBe(true);
          expect(moving.reconnect(), "a second call while dialing").toBe(false);
          await waitFor("the move", () => reconnects === 1 && moving.status === "connected");
          // Straight to the second server: the frozen one is not dialed again first.
          expect(Date.now() - askedAt).toBeLessThan(1500);
          await waitFor("the subscription on the second server", () => {
            other.publish("t.moved", bytes("here"));
            return got.length > 0;
          });
          expect(text(await other.request("svc.moved", bytes("served")))).toBe("served");
        } finally {
          await first.resume();
        }
        // Past the frozen server's ping window after the thaw (four intervals): nothing left of the
        // old connection comes back to it.
        await new Promise((resolve) => setTimeout(resolve, 6000));
        got.length = 0;
        for (let i = 0; i < 20; i++) other.publish("t.moved", bytes(`m${i}`));
        await other.flush();
        await waitFor("every message", () => got.length >= 20);
        await moving.flush();
        expect(got).toEqual(Array.from({ length: 20 }, (_, i) => `t.moved m${i}`));
        expect(reconnects).toBe(1);
      } finally {
        await Promise.all(buses.splice(0).map((b) => b.close()));
        await Promise.all([first.stop(), second.stop()]);
      }
    },
  );

  it("reconnect() with a single server known does nothing: there is nowhere else to go", async () => {
    const bus = await connect("alone");
    let reconnects = 0;
    bus.on("reconnected", () => reconnects++);
    expect(bus.reconnect()).toBe(false);
    await bus.flush();
    expect([bus.status, reconnects]).toEqual(["connected", 0]);
  });

  it("reconnect() does nothing after close", async () => {
    const bus = await connect("closed");
    await bus.close();
    expect(bus.reconnect()).toBe(false);
    expect(bus.status).toBe("closed");
  });

  it("reports a server-side slow consumer disconnect as reconnected", async () => {
    // A small max_pending and write deadline make the server drop a subscriber that stops reading soon.
    const strict = await NatsServer.start({ config: 'max_pending: 1048576\nwrite_deadline: "200ms"' });
    try {
      const sub = await NatsBus.connect({
        servers: strict.url,
        reconnectTimeWaitMs: TEST_RECONNECT_TIME_WAIT_MS,
      });
      buses.push(sub);
      let reconnects = 0;
      sub.on("reconnected", () => reconnects++);
      let blocked = false;
      sub.subscribe("flood", () => {
        if (blocked) return;
        blocked = true;
        // Block this process's event loop like a CPU-bound handler would.
        const until = Date.now() + 1500;
        while (Date.now() < until);
      });
      await sub.flush();
      // The flood comes from another process, which keeps writing while this one is blocked.
      const flood = floodFromChild(strict.url, "flood");
      try {
        await waitFor("the reconnect", () => reconnects >= 1);
      } finally {
        flood.kill("SIGKILL");
      }
      expect(strict.log).toContain("Slow Consumer");
    } finally {
      await strict.stop();
    }
  });
});

/** Publishes 64 KiB messages from a child process (nats.js) until killed. */
function floodFromChild(url: string, subject: string): ChildProcess {
  const script = `
    import { connect } from "nats";
    const nc = await connect({ servers: ${JSON.stringify(url)}, maxReconnectAttempts: -1 });
    const payload = new Uint8Array(65536);
    for (let i = 0; ; i++) {
      nc.publish(${JSON.stringify(subject)}, payload);
      if (i % 16 === 0) await nc.flush();
    }
  `;
  return spawn(process.execPath, ["--input-type=module", "-e", script], {
    cwd: repoRoot,
    stdio: ["ignore", "ignore", "inherit"],
  });
}
