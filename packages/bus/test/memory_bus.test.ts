import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { BusTimeoutError, MemoryBus } from "../src/index.js";
import { busContract, bytes, record, text } from "./bus_contract.js";

busContract("MemoryBus", async () => {
  const bus = new MemoryBus();
  return { sub: bus, pub: bus };
});

describe("MemoryBus", () => {
  let bus: MemoryBus;

  afterEach(async () => {
    await bus.close();
  });

  it("delivers after the publisher's synchronous code, never inside publish()", async () => {
    bus = new MemoryBus();
    const { got } = record(bus, "t.a");
    bus.publish("t.a", bytes("1"));
    expect(got).toEqual([]);
    await bus.flush();
    expect(got).toEqual(["t.a 1"]);
  });

  it("drops messages already queued for a subscription that unsubscribes", async () => {
    bus = new MemoryBus();
    const { got, sub } = record(bus, "t.a");
    bus.publish("t.a", bytes("1"));
    sub.unsubscribe();
    await bus.flush();
    expect(got).toEqual([]);
  });

  it("drops messages beyond the pending limit and reports the subscription as a slow consumer", async () => {
    bus = new MemoryBus({ maxPendingPerSubscription: 10 });
    const slow: string[] = [];
    bus.on("slowConsumer", (subject) => slow.push(subject));
    const { got } = record(bus, "t.*");
    for (let i = 0; i < 25; i++) bus.publish("t.a", bytes(String(i)));
    await bus.flush();
    expect(got).toHaveLength(10);
    expect(slow).toEqual(["t.*"]);
    for (let i = 0; i < 25; i++) bus.publish("t.a", bytes(String(i)));
    await bus.flush();
    expect(got).toHaveLength(20);
    expect(slow).toEqual(["t.*", "t.*"]);
  });

  it("times requests out on the injected clock", async () => {
    const clock = new ManualClock();
    bus = new MemoryBus({ clock });
    bus.serve("svc.silent", () => new Promise<Uint8Array>(() => {}));
    let settled = false;
    const pending = bus.request("svc.silent", bytes(""), { timeoutMs: 1000 });
    const timedOut = expect(pending.finally(() => (settled = true))).rejects.toThrow(BusTimeoutError);
    await bus.flush();
    await clock.advance(999);
    expect(settled).toBe(false);
    await clock.advance(1);
    await timedOut;
  });

  it("delivers what was published before close, then nothing", async () => {
    bus = new MemoryBus();
    const { got } = record(bus, "t.a");
    bus.publish("t.a", bytes("1"));
    await bus.close();
    expect(got).toEqual(["t.a 1"]);
    expect(bus.status).toBe("closed");
  });

  it("keeps delivering in order when a handler publishes more messages", async () => {
    bus = new MemoryBus();
    const seen: string[] = [];
    bus.subscribe("chain.*", (data, subject) => {
      seen.push(subject);
      const n = Number(text(data));
      if (n < 3) bus.publish(`chain.${n + 1}`, bytes(String(n + 1)));
    });
    bus.publish("chain.0", bytes("0"));
    await bus.flush();
    expect(seen).toEqual(["chain.0", "chain.1", "chain.2", "chain.3"]);
  });

  it("rotates queue group members round robin", async () => {
    bus = new MemoryBus();
    const members = [record(bus, "q.a", { queue: "g" }), record(bus, "q.a", { queue: "g" })];
    for (let i = 0; i < 4; i++) bus.publish("q.a", bytes(String(i)));
    await bus.flush();
    expect(members.map((m) => m.got.length)).toEqual([2, 2]);
  });
});
