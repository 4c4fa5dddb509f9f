/**
 * The reply-on-error rule shared by both buses: when a responder throws, the requester's promise
 * rejects with a ResponderError whose message is "responder on <subject> failed: <name>: <message>"
 * (a MemoryBus ResponderError also carries the thrown error as `cause`). On NATS the
 * failure travels as an empty reply with the NATS services error headers (`Nats-Service-Error`,
 * `Nats-Service-Error-Code: 500`), the convention `nats micro` and the `nats` CLI understand.
 */
import { ResponderError } from "./bus.js";

/** Longest failure description sent to the requester, in characters (it travels in a header). */
export const FAILURE_DESCRIPTION_MAX_LENGTH = 256;

/** NATS services status code for a failure of the service itself. */
export const RESPONDER_FAILURE_CODE = "500";

const LINE_BREAKS = /[\r\n]+/g;

/** One header-safe line naming what the responder threw. */
export function describeFailure(err: unknown): string {
  const text = err instanceof Error ? `${err.name}: ${err.message}` : `thrown value: ${String(err)}`;
  return text.replace(LINE_BREAKS, " ").slice(0, FAILURE_DESCRIPTION_MAX_LENGTH);
}

export function responderError(subject: string, description: string, cause?: unknown): ResponderError {
  return new ResponderError(
    `responder on ${subject} failed: ${description}`,
    cause === undefined ? undefined : { cause },
  );
}
