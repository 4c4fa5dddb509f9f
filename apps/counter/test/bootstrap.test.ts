import { Writable } from "node:stream";
import { pino } from "pino";
import { describe, expect, test } from "vitest";
import { DISCOVERY_MS, P, RETRY_MS, useBootstrap } from "./bootstrap_setup.js";

describe("counter - bootstrap", () => {
  const setUp = useBootstrap();

  test("counter - alone (embedded), a partition never bootstrapped serves at once and is marked", async () => {
    const { clock, store, served, requests, b } = await setUp({ alone: true });
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(served).toEqual([P]);
    expect(requests).toEqual([]);
    expect(await store.isBootstrapped(P)).toBe(true);
  });

  test("counter - a partition already marked serves at once, asking nobody", async () => {
    const { clock, store, served, requests, b } = await setUp({ peers: ["dc2"] });
    await store.markBootstrapped((await store.acquire(P, "node-a", 3_600_000))!);
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(served).toEqual([P]);
    expect(requests).toEqual([]);
  });

  test("counter - a partition serves only once every live peer's transfer is merged, requests batched per peer", async () => {
    const { clock, store, served, requests, b } = await setUp({ peers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([
      ["dc2", [P]],
      ["dc3", [P]],
    ]);
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([]);
    expect(b.isReady(P)).toBe(false);
    b.peerSynced(P, "dc3", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
    expect(await store.isBootstrapped(P)).toBe(true);
    expect(b.progress).toEqual({ ready: 1, held: 1 });
  });

  test("counter - a peer's transfer merged before the partition started syncing counts: it is not asked again", async () => {
    const { clock, served, requests, b } = await setUp({ peers: ["dc2"] });
    // Taken, its bootstrap mark being read: a comparison dc2 drove ends meanwhile.
    const held = b.partitionHeld(P);
    b.peerSynced(P, "dc2", false);
    await held;
    await clock.advance(0);
    expect(requests).toEqual([]);
    expect(served).toEqual([P]);
  });

  test("counter - a transfer that ends for a partition not held teaches nothing to a later tenure", async () => {
    const { clock, served, requests, b } = await setUp({ peers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    b.partitionDropped(P);
    // Its last entries were merged (or refused) as the partition was lost.
    b.peerSynced(P, "dc2", false);
    requests.length = 0;
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    expect(served).toEqual([]);
  });

  test("counter - an unanswered request is sent again after the retry interval, to the peers still missing", async () => {
    const { clock, requests, b } = await setUp({ peers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    b.peerSynced(P, "dc2", false);
    requests.length = 0;
    await clock.advance(RETRY_MS * 2 + 1);
    expect(requests.length).toBeGreaterThan(0);
    expect(requests.every(([to]) => to === "dc3")).toBe(true);
  });

  test("counter - with a listed peer that is not live, a partition waits however long it takes, then syncs when the peer comes", async () => {
    const { clock, live, served, requests, b } = await setUp({ expectedPeers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(DISCOVERY_MS * 10);
    expect(served).toEqual([]);
    expect(requests).toEqual([]);
    expect(b.progress).toEqual({ ready: 0, held: 1 });
    live.push("dc2");
    b.remoteUp();
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - with no peer listed and none heard within discovery, the first DC of a deployment serves", async () => {
    const { clock, served, b } = await setUp();
    await b.partitionHeld(P);
    await clock.advance(DISCOVERY_MS - 1);
    expect(served).toEqual([]);
    await clock.advance(RETRY_MS + 1);
    expect(served).toEqual([P]);
  });

  test("counter - a partition waiting out discovery serves the moment it ends, not at the next retry", async () => {
    const discoveryMs = RETRY_MS + RETRY_MS / 2;
    const { clock, served, b } = await setUp({ discoveryMs });
    await b.partitionHeld(P);
    await clock.advance(discoveryMs - 1);
    expect(served).toEqual([]);
    await clock.advance(1);
    expect(served).toEqual([P]);
  });

  test("counter - the only peer going down before its transfer sends the partition back to waiting", async () => {
    const { clock, live, served, requests, b } = await setUp({ peers: ["dc2"], expectedPeers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    live.length = 0;
    b.remoteDown("dc2");
    requests.length = 0;
    await clock.advance(RETRY_MS * 3);
    expect(served).toEqual([]);
    expect(requests).toEqual([]);
    live.push("dc2");
    b.remoteUp();
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
  });

  test("counter - a peer going down after another's transfer was merged lets the partition serve", async () => {
    const { clock, live, served, b } = await setUp({ peers: ["dc2", "dc3"], expectedPeers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    b.peerSynced(P, "dc2", false);
    live.splice(live.indexOf("dc3"), 1);
    b.remoteDown("dc3");
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - a peer that answers while learning the partition itself teaches nothing: it is asked again", async () => {
    const { clock, served, requests, b } = await setUp({
      dc: "dc3",
      peers: ["dc2"],
      expectedPeers: ["dc1", "dc2"],
    });
    await b.partitionHeld(P);
    await clock.advance(0);
    requests.length = 0;
    b.peerSynced(P, "dc2", true);
    await clock.advance(RETRY_MS * 2);
    expect(served).toEqual([]);
    expect(requests).toContainEqual(["dc2", [P]]);
    // Once it holds the partition, its answer teaches.
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - a learning peer's transfer merged before the partition started syncing does not count", async () => {
    const { clock, served, requests, b } = await setUp({ peers: ["dc2"], expectedPeers: ["dc3"] });
    b.peerSynced(P, "dc2", true);
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    expect(served).toEqual([]);
  });

  test("counter - every listed peer learning the partition too: the DC first by name starts it, the others keep asking", async () => {
    const first = await setUp({ dc: "dc1", peers: ["dc2", "dc3"], expectedPeers: ["dc2", "dc3"] });
    await first.b.partitionHeld(P);
    await first.clock.advance(0);
    first.b.peerSynced(P, "dc2", true);
    await first.clock.advance(0);
    expect(first.served).toEqual([]);
    first.b.peerSynced(P, "dc3", true);
    await first.clock.advance(0);
    expect(first.served).toEqual([P]);
    first.b.stop();

    const other = await setUp({ dc: "dc2", peers: ["dc1", "dc3"], expectedPeers: ["dc1", "dc3"] });
    await other.b.partitionHeld(P);
    await other.clock.advance(0);
    other.b.peerSynced(P, "dc1", true);
    other.b.peerSynced(P, "dc3", true);
    other.requests.length = 0;
    await other.clock.advance(RETRY_MS * 2);
    expect(other.served).toEqual([]);
    expect(new Set(other.requests.map(([to]) => to))).toEqual(new Set(["dc1", "dc3"]));
    // dc1 started it: it teaches now, and dc3, still learning, need not.
    other.b.peerSynced(P, "dc1", false);
    other.b.peerSynced(P, "dc3", true);
    await other.clock.advance(0);
    expect(other.served).toEqual([P]);
  });

  test("counter - a listed peer not heard keeps a new deployment waiting, though every live peer is learning too", async () => {
    const { clock, served, b } = await setUp({ dc: "dc1", peers: ["dc2"], expectedPeers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    for (let i = 0; i < 10; i++) {
      await clock.advance(RETRY_MS);
      b.peerSynced(P, "dc2", true);
    }
    expect(served).toEqual([]);
  });

  test("counter - with no peers listed, the first by name of DCs learning together starts only once discovery ends", async () => {
    const { clock, served, b } = await setUp({ dc: "dc1", peers: ["dc2"] });
    const startedAt = clock.now();
    await b.partitionHeld(P);
    await clock.advance(0);
    b.peerSynced(P, "dc2", true);
    await clock.advance(0);
    expect(served).toEqual([]);
    // Asked again each retry, it answers while learning each time; discovery ends meanwhile.
    while (clock.now() - startedAt < DISCOVERY_MS * 2 && served.length === 0) {
      await clock.advance(RETRY_MS);
      b.peerSynced(P, "dc2", true);
      await clock.advance(0);
    }
    expect(served).toEqual([P]);
    expect(clock.now() - startedAt).toBeGreaterThanOrEqual(DISCOVERY_MS);
  });

  test("counter - a DC heard while a partition syncs is asked too, and taught by it the partition serves", async () => {
    const { clock, live, served, requests, b } = await setUp({ dc: "dc1", peers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    live.push("dc3");
    requests.length = 0;
    b.remoteUp();
    await clock.advance(0);
    expect(requests).toEqual([["dc3", [P]]]);
    // dc2 is learning too: without dc3's answer, dc1 (first by name) would start the partition empty.
    await clock.advance(DISCOVERY_MS);
    b.peerSynced(P, "dc2", true);
    expect(served).toEqual([]);
    b.peerSynced(P, "dc3", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - the first by name starts a partition only if every live peer answered it is learning too", async () => {
    const { clock, live, served, b } = await setUp({ dc: "dc1", peers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(DISCOVERY_MS);
    // dc3 is live (heard, its remoteUp not handled yet) but was not asked in this round.
    live.push("dc3");
    b.peerSynced(P, "dc2", true);
    await clock.advance(0);
    expect(served).toEqual([]);
    // The next round asks both; both learning, dc1 starts it.
    await clock.advance(RETRY_MS);
    b.peerSynced(P, "dc2", true);
    b.peerSynced(P, "dc3", true);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - with no peers listed, a DC heard since start and down now is waited for, not taken for absent", async () => {
    const { clock, live, served, requests, b } = await setUp({ dc: "dc1", heard: ["dc3"] });
    await b.partitionHeld(P);
    await clock.advance(DISCOVERY_MS * 3);
    expect(served).toEqual([]);
    // A new DC, learning too, is all there is to hear: dc3 may hold the partition.
    live.push("dc2");
    b.remoteUp();
    for (let i = 0; i < 5; i++) {
      await clock.advance(RETRY_MS);
      b.peerSynced(P, "dc2", true);
    }
    expect(served).toEqual([]);
    live.push("dc3");
    b.remoteUp();
    await clock.advance(0);
    expect(requests.at(-1)).toEqual(["dc3", [P]]);
    b.peerSynced(P, "dc3", false);
    b.peerSynced(P, "dc2", true);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - a DC coming and going that is asked already does not bring back asking learning peers every second", async () => {
    const { clock, live, requests, b } = await setUp({
      dc: "dc2",
      peers: ["dc1"],
      expectedPeers: ["dc1", "dc3"],
    });
    await b.partitionHeld(P);
    const answer = (): void => {
      for (const [to] of requests.splice(0)) b.peerSynced(P, to, true);
    };
    for (let t = 0; t < 60; t++) {
      // dc4, learning too, is heard once early on: a DC not asked before, asked every second a while.
      if (t === 1) {
        live.push("dc4");
        b.remoteUp();
      }
      if (t === 5) {
        live.pop();
        b.remoteDown("dc4");
      }
      await clock.advance(RETRY_MS);
      answer();
    }
    let asked = 0;
    for (let t = 0; t < 63; t++) {
      // Then it comes back every 9 s and is lost 4 s later.
      if (t % 9 === 0) {
        live.push("dc4");
        b.remoteUp();
      }
      if (t % 9 === 4) {
        live.pop();
        b.remoteDown("dc4");
      }
      await clock.advance(RETRY_MS);
      asked += requests.filter(([to]) => to === "dc1").length;
      answer();
    }
    // Once in 10 s at most, give or take the first answer of dc4.
    expect(asked).toBeLessThanOrEqual(8);
  });

  test("counter - while it waits, the progress line names the DCs it cannot hear and counts partitions only learners answered, every 10 s when unchanged", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(JSON.parse(chunk.toString("utf8")) as Record<string, unknown>);
        done();
      },
    });
    const { clock, b } = await setUp({
      dc: "dc2",
      peers: ["dc1"],
      expectedPeers: ["dc1", "dc3"],
      logger: pino({ level: "info" }, sink),
    });
    await b.partitionHeld(P);
    await clock.advance(0);
    b.peerSynced(P, "dc1", true);
    for (let t = 0; t < 30; t++) await clock.advance(RETRY_MS);
    const progress = lines.filter((l) => l.msg === "bootstrap in progress");
    expect(progress.at(-1)).toMatchObject({ ready: 0, held: 1, learningTogether: 1, unreachable: ["dc3"] });
    // The first line, the one after dc1's answer, then one every 10 s: not one a second.
    expect(progress.length).toBeLessThanOrEqual(5);
  });

  test("counter - a dropped partition forgets its sync; held again, it asks again", async () => {
    const { clock, requests, served, b } = await setUp({ peers: ["dc2"] });
    b.peerSynced(P, "dc2", false);
    b.partitionDropped(P);
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    expect(served).toEqual([]);
  });
});
