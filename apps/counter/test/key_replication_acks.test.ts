/**
 * Idempotency keys across data centers (key_replication.ts), two DCs' nodes on one in-memory bus
 * (key_nodes.ts): what the other DC stored it acknowledges and the sender lets go; what it did not
 * goes again, after a wait or at once when the DC is heard again or asks.
 */
import { keysAckSubject, keysMissedSubject } from "@livecount/bus";
import { encodeMessage } from "@livecount/protocol";
import { describe, expect, test } from "vitest";
import { PARTITION, ACK_WAIT_MS, nodeOf, like, outcomes, setUp } from "./key_nodes.js";

describe("counter - idempotency keys across data centers, acknowledged", () => {
  test("counter - held keys go again once per cause within a heartbeat: heard again (up or gap), or asked by the DC", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1", { clock });
    one.keys.send(new Map([[PARTITION, [like("h1"), like("h2")]]]));
    const resent = async (): Promise<number> => (await outcomes(one)).resent ?? 0;
    // Each of dc2's nodes' heartbeats shows the gap: one resend.
    one.keys.remoteChanged("dc2", "gap");
    one.keys.remoteChanged("dc2", "gap");
    expect(await resent()).toBe(2);
    // Each of dc2's nodes asks: one resend more, asking being a cause of its own.
    bus.publish(keysMissedSubject("dc1", "dc2"), new Uint8Array(0));
    bus.publish(keysMissedSubject("dc1", "dc2"), new Uint8Array(0));
    await clock.advance(0);
    expect(await resent()).toBe(4);
    // Another DC, or a heartbeat later: again.
    one.keys.remoteChanged("dc3", "up");
    await clock.advance(250);
    one.keys.remoteChanged("dc2", "up");
    expect(await resent()).toBe(8);
  });

  test("counter - what the other DC stored it acknowledges, and it is let go; what is not goes again until it is", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1", { clock });
    const two = nodeOf(bus, stores.dc2, "dc2", { clock });
    const resent = async (): Promise<number> => (await outcomes(one)).resent ?? 0;
    const held = async (): Promise<number> => (await one.metrics.keysHeld.get()).values[0]?.value ?? 0;
    one.keys.remoteChanged("dc2", "up");
    one.keys.send(new Map([[PARTITION, [like("m1"), like("m2")]]]));
    expect(await held()).toBe(2);
    await clock.advance(0);
    expect(await held(), "stored in dc2 and acknowledged").toBe(0);
    // dc2's only node gone: nothing stores or acknowledges m3.
    two.keys.stop();
    one.keys.send(new Map([[PARTITION, [like("m3")]]]));
    await clock.advance(ACK_WAIT_MS);
    expect(await resent(), "sent again once it waited").toBe(1);
    const twoAgain = nodeOf(bus, stores.dc2, "dc2", { clock });
    await clock.advance(2 * ACK_WAIT_MS);
    expect(await resent(), "and again, twice as long after").toBe(2);
    expect(await outcomes(twoAgain)).toEqual({ stored: 1 });
    expect(await held()).toBe(0);
    await clock.advance(10 * ACK_WAIT_MS);
    expect(await resent(), "acknowledged: no more").toBe(2);
    // An acknowledgement of another process under this node id, or malformed: nothing let go.
    twoAgain.keys.stop();
    one.keys.send(new Map([[PARTITION, [like("m4")]]]));
    // A name no DC here goes by: not answered (m4 would go again), not remembered.
    bus.publish(keysMissedSubject("dc1", "dc9"), new Uint8Array(0));
    const acks = keysAckSubject("dc1", one.node);
    bus.publish(acks, encodeMessage({ type: "keysack", dc: "dc2", epoch: 1, seqs: [1, 2, 3, 4, 5] }));
    bus.publish(acks, new Uint8Array([0xc1]));
    await clock.advance(0);
    expect(await held()).toBe(1);
    expect(await resent()).toBe(2);
  });

  test("counter - a message larger than the import queue is taken whole into an empty one; a node that stops counts what was not acknowledged lost", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1", { clock });
    const two = nodeOf(bus, stores.dc2, "dc2", { clock, maxQueued: 1 });
    one.keys.remoteChanged("dc2", "up");
    one.keys.send(new Map([[PARTITION, [like("w1"), like("w2"), like("w3")]]]));
    await clock.advance(0);
    expect(await outcomes(two)).toEqual({ stored: 3 });
    expect((await one.metrics.keysHeld.get()).values[0]?.value, "acknowledged").toBe(0);
    two.keys.stop();
    one.keys.send(new Map([[PARTITION, [like("w4"), like("w5")]]]));
    await clock.advance(ACK_WAIT_MS);
    one.keys.stop();
    expect((await outcomes(one)).lost, "not acknowledged past the first wait").toBe(2);
  });
});
