/** The open sockets as a dense array: each knows its slot, and one closing moves the last into it. */
import { describe, expect, test } from "vitest";
import { OpenSockets, type Slotted } from "../src/open_sockets.js";

class FakeSocket implements Slotted {
  readonly data = { openSlot: -1 };
  constructor(readonly name: string) {}
  getUserData(): { openSlot: number } {
    return this.data;
  }
}

describe("gateway - open sockets", () => {
  test("open sockets - closing any one keeps the rest, each at the slot it knows", () => {
    const open = new OpenSockets<FakeSocket>();
    const sockets = ["a", "b", "c", "d"].map((n) => new FakeSocket(n));
    for (const ws of sockets) open.add(ws);
    expect(open.size).toBe(4);
    open.delete(sockets[1]!);
    expect(open.list().map((ws) => ws.name)).toEqual(["a", "d", "c"]);
    expect(sockets[1]!.data.openSlot).toBe(-1);
    open.delete(sockets[3]!);
    open.delete(sockets[2]!);
    expect(open.list().map((ws) => ws.name)).toEqual(["a"]);
    for (const ws of open.list()) expect(open.list()[ws.data.openSlot]).toBe(ws);
    // Closing twice, or a socket never added, changes nothing.
    open.delete(sockets[2]!);
    open.delete(new FakeSocket("never"));
    expect(open.size).toBe(1);
    open.delete(sockets[0]!);
    expect(open.size).toBe(0);
  });

  test("open sockets - the list handed out stays whole while sockets close", () => {
    const open = new OpenSockets<FakeSocket>();
    const sockets = ["a", "b", "c"].map((n) => new FakeSocket(n));
    for (const ws of sockets) open.add(ws);
    const all = open.list();
    for (const ws of all) open.delete(ws);
    expect(all).toEqual(sockets);
    expect(open.size).toBe(0);
  });
});
