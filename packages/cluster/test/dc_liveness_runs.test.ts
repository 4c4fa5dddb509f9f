/**
 * What DC heartbeats say of what their sender heard (dc_liveness.ts): each counter node's unbroken
 * run of another DC's nodes' heartbeats, started anew at a gap or a new process, and what the other
 * DCs' nodes say they heard of this one, passed to heard listeners.
 */
import { DCS_SUBJECT, MemoryBus } from "@livecount/bus";
import { decodeMessage, encodeMessage, type DcHeartbeat } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { DcLiveness, type Run } from "../src/dc_liveness.js";
import { logLines } from "./log_lines.js";

const HEARTBEAT_MS = 100;
const LEASE_MS = 1_000;

describe("cluster - what data centers heard of each other", () => {
  let bus: MemoryBus;
  let liveness: DcLiveness;
  afterEach(async () => {
    liveness.stop();
    await bus.close();
  });

  function setUp() {
    const clock = new ManualClock();
    bus = new MemoryBus({ clock });
    const epoch = clock.now();
    liveness = new DcLiveness({
      bus,
      clock,
      logger: logLines().logger,
      dc: "dc1",
      leaseMs: LEASE_MS,
      heartbeatMs: HEARTBEAT_MS,
      announceAs: "n1",
    });
    const heard: Array<[string, Run[]]> = [];
    liveness.onHeard((dc, runs) => heard.push([dc, [...runs]]));
    const own: DcHeartbeat[] = [];
    bus.subscribe(DCS_SUBJECT, (data) => {
      const msg = decodeMessage(data);
      if (msg.type === "dc" && msg.dc === "dc1") own.push(msg);
    });
    liveness.start();
    /** A heartbeat of another DC's node, delivered. */
    const beat = async (b: Omit<DcHeartbeat, "type" | "leaseMs">): Promise<void> => {
      bus.publish(DCS_SUBJECT, encodeMessage({ type: "dc", leaseMs: LEASE_MS, ...b }));
      await bus.flush();
    };
    return { clock, epoch, heard, own, beat };
  }

  test("cluster - heartbeats carry each other DC's node's unbroken run: a gap or a new process starts it anew", async () => {
    const { clock, own, beat } = setUp();
    const runsSaid = async () => {
      await clock.advance(HEARTBEAT_MS);
      return own.at(-1)!.heard;
    };
    expect(await runsSaid(), "nothing heard yet").toEqual([]);
    for (const seq of [5, 6, 7]) await beat({ dc: "dc2", node: "b1", seq, epoch: 100 });
    await beat({ dc: "dc2", node: "b2", seq: 1, epoch: 200 });
    // A node of a release without epochs cannot read what is said of it: left out.
    await beat({ dc: "dc3", node: "c1", seq: 1 });
    expect(await runsSaid()).toEqual([
      ["dc2", "b1", 100, 5, 7],
      ["dc2", "b2", 200, 1, 1],
    ]);

    await beat({ dc: "dc2", node: "b1", seq: 9, epoch: 100 });
    await beat({ dc: "dc2", node: "b2", seq: 1, epoch: 300 });
    expect(await runsSaid(), "a gap, and a new process under b2").toEqual([
      ["dc2", "b1", 100, 9, 9],
      ["dc2", "b2", 300, 1, 1],
    ]);
    await beat({ dc: "dc2", node: "b1", seq: 8, epoch: 100 });
    await beat({ dc: "dc2", node: "b1", seq: 10, epoch: 100 });
    expect(await runsSaid(), "a late, lower number of the same process changes nothing").toEqual([
      ["dc2", "b1", 100, 9, 10],
      ["dc2", "b2", 300, 1, 1],
    ]);

    await clock.advance(LEASE_MS / 2);
    await beat({ dc: "dc2", node: "b1", seq: 11, epoch: 100 });
    await clock.advance(LEASE_MS / 2 + HEARTBEAT_MS);
    expect(own.at(-1)!.heard, "b2 not heard for its DC's lease").toEqual([["dc2", "b1", 100, 9, 11]]);
  });

  test("cluster - what another DC's nodes heard of this process reaches heard listeners, each node's run", async () => {
    const { clock, epoch, heard, beat } = setUp();
    await clock.advance(5 * HEARTBEAT_MS);
    await beat({ dc: "dc2", node: "b1", seq: 1, epoch: 100, heard: [["dc1", "n1", epoch, 1, 5]] });
    await beat({ dc: "dc2", node: "b2", seq: 1, epoch: 200, heard: [["dc1", "n1", epoch, 3, 4]] });
    expect(heard).toEqual([
      ["dc2", [{ from: 1, to: 5 }]],
      [
        "dc2",
        [
          { from: 1, to: 5 },
          { from: 3, to: 4 },
        ],
      ],
    ]);
    heard.length = 0;
    // About another process under this id, another node, another DC's n1: not this process's runs.
    await beat({
      dc: "dc2",
      node: "b2",
      seq: 2,
      epoch: 200,
      heard: [
        ["dc1", "n1", epoch - 1, 1, 9],
        ["dc1", "n2", epoch, 1, 9],
        ["dc3", "n1", epoch, 1, 9],
      ],
    });
    expect(heard, "b2 no longer hears this process").toEqual([["dc2", [{ from: 1, to: 5 }]]]);
    heard.length = 0;
    // A heartbeat without reports (an older release) says nothing either way.
    await beat({ dc: "dc2", node: "b1", seq: 2, epoch: 100 });
    expect(heard).toEqual([]);
    // b1 not heard for its DC's lease: what it said is no longer news.
    await clock.advance(LEASE_MS + HEARTBEAT_MS);
    await beat({ dc: "dc2", node: "b2", seq: 3, epoch: 200, heard: [["dc1", "n1", epoch, 16, 16]] });
    expect(heard).toEqual([["dc2", [{ from: 16, to: 16 }]]]);
    expect(liveness.lastSeq, "this process's heartbeats so far").toBe(17);
  });
});
