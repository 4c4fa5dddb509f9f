/**
 * `npm start` on NATS (LIVECOUNT_NATS_URL set) runs a gateway and a counter node like any others: a
 * second process under a live one's LIVECOUNT_NODE_ID refuses to start and leaves nothing open
 * behind it, and one that hears a later process under its id, as a counter node or as a gateway,
 * says so, for its process to exit.
 */
import { gatewaysSubject, nodesSubject } from "@livecount/bus";
import { encodeMessage } from "@livecount/protocol";
import { connect } from "nats";
import { createServer } from "node:net";
import { afterAll, beforeAll, expect, test } from "vitest";
import { logLines } from "../../../packages/cluster/test/log_lines.js";
import { NatsServer, describeWithNats } from "../../../test/support/nats_server.js";
import { freePort } from "../../../test/support/ports.js";
import { eventually } from "../../../test/support/eventually.js";
import { startStandalone } from "../src/index.js";

describeWithNats("standalone - counter node id on NATS", () => {
  let nats: NatsServer;
  beforeAll(async () => {
    nats = await NatsServer.start();
  });
  afterAll(async () => {
    await nats.stop();
  });

  const envOn = (port: number): Record<string, string> => ({
    LIVECOUNT_NATS_URL: nats.url,
    LIVECOUNT_NODE_ID: "standalone-1",
    LIVECOUNT_PORT: String(port),
    LIVECOUNT_HOST: "127.0.0.1",
    LIVECOUNT_DEMO: "0",
  });

  test("standalone - a second process under a live one's id refuses to start and frees its port; a later one supersedes the first", async () => {
    const superseded: string[] = [];
    const first = await startStandalone({
      env: envOn(await freePort()),
      logger: logLines().logger,
      onSuperseded: (what) => superseded.push(what),
    });
    try {
      const port = await freePort();
      // Its gateway asks first, before it listens or beats.
      await expect(startStandalone({ env: envOn(port), logger: logLines().logger })).rejects.toThrow(
        /gateway node id standalone-1 is in use in dc1 by incarnation standalone-1-/,
      );
      await new Promise<void>((resolve, reject) => {
        const probe = createServer().once("error", reject);
        probe.listen(port, "127.0.0.1", () => probe.close(() => resolve()));
      });
      expect(superseded).toEqual([]);

      // A process started after this one announces the id: this one stops and says so, for its
      // counter node and for its gateway.
      const nc = await connect({ servers: nats.url });
      nc.publish(
        nodesSubject("dc1"),
        encodeMessage({
          type: "node",
          node: "standalone-1",
          incarnation: "later",
          leaseMs: 6000,
          state: "up",
          startedAt: Date.now() + 60_000,
        }),
      );
      nc.publish(
        gatewaysSubject("dc1"),
        encodeMessage({
          type: "gateway",
          gateway: "standalone-1-later",
          node: "standalone-1",
          leaseMs: 10_000,
          state: "up",
          startedAt: Date.now() + 60_000,
        }),
      );
      await nc.drain();
      await eventually(() => expect(superseded.sort()).toEqual(["counter node", "gateway"]));
      expect(first.counter.ready).toBe(false);
    } finally {
      await first.close();
    }
  });
});
