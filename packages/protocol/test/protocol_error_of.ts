import { expect } from "vitest";
import { ProtocolError, type ErrorCode } from "../src/index.js";

/** Runs `fn`, expecting it to throw a ProtocolError (with `code`, when given), and returns it. */
export function protocolErrorOf(fn: () => unknown, code?: ErrorCode): ProtocolError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ProtocolError);
    const e = err as ProtocolError;
    if (code !== undefined) expect(e.code, e.message).toBe(code);
    return e;
  }
  throw new Error(`expected a ProtocolError${code === undefined ? "" : ` (${code})`}, nothing was thrown`);
}
