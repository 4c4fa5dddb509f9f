/** The bus's named errors for what nats.js throws (nats_bus.ts). */
import { ErrorCode, NatsError } from "nats";
import {
  BusClosedError,
  BusError,
  BusTimeoutError,
  InvalidSubjectError,
  NoRespondersError,
  PayloadTooLargeError,
} from "./bus.js";

/** Maps a nats.js error to the bus's named errors. */
export function toBusError(err: unknown, what: string, timeoutMs?: number): BusError {
  if (err instanceof BusError) return err;
  if (err instanceof NatsError) {
    switch (err.code) {
      case ErrorCode.Timeout:
        return new BusTimeoutError(`${what} timed out after ${timeoutMs ?? "?"} ms`, { cause: err });
      case ErrorCode.NoResponders:
        return new NoRespondersError(`${what}: no responders`, { cause: err });
      case ErrorCode.ConnectionClosed:
      case ErrorCode.ConnectionDraining:
        return new BusClosedError(`${what}: bus is closed`, { cause: err });
      case ErrorCode.BadSubject:
        return new InvalidSubjectError(`${what}: invalid subject`, { cause: err });
      default:
        break;
    }
  }
  return new BusError(`${what} failed`, { cause: err });
}

/** NATS refused the credentials, or the address is not one: a later try would fail the same way. */
export function isRefusal(err: unknown): boolean {
  if (err instanceof TypeError) return true;
  const code = (err as { code?: unknown } | undefined)?.code;
  return code === "AUTHORIZATION_VIOLATION" || code === "AUTHENTICATION_EXPIRED";
}

/**
 * PayloadTooLargeError when nats.js refused `data` for the server's `max_payload` (`max`); else
 * undefined.
 */
export function tooLarge(
  err: unknown,
  what: string,
  data: Uint8Array,
  max: number,
): PayloadTooLargeError | undefined {
  if (!(err instanceof NatsError) || err.code !== ErrorCode.MaxPayloadExceeded) return undefined;
  return new PayloadTooLargeError(
    `${what}: ${data.length} bytes, more than the server's max_payload of ${max}`,
    {
      cause: err,
    },
  );
}
