import { describe, expect, test } from "vitest";
import { ProtocolError, replyTo, type SnapshotRequest } from "../src/index.js";

const snapshot: SnapshotRequest = { type: "snapshot", page: "p" };

describe("protocol - typed node replies", () => {
  test("protocol - a reply of the type the request asks for comes back typed", () => {
    const state = replyTo(snapshot, { type: "page_state", page: "p", counters: {}, ts: 1 });
    expect(state.counters).toEqual({});
  });

  test("protocol - an error reply throws its stable code", () => {
    expect(() => replyTo(snapshot, { type: "error", code: "unavailable", message: "moving" })).toThrow(
      expect.objectContaining({ code: "unavailable", message: "moving" }),
    );
  });

  test("protocol - a reply of another type is a peer's bug: internal, never a silent cast", () => {
    let err: unknown;
    try {
      replyTo(snapshot, { type: "ack" });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ProtocolError);
    expect((err as ProtocolError).code).toBe("internal");
    expect((err as ProtocolError).message).toBe("a snapshot request got a ack reply");
  });
});
