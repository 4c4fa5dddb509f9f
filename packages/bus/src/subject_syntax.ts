/**
 * NATS subject grammar, checked the same way by both buses so a subject that works in the embedded
 * default also works on NATS. Stricter than nats-server on purpose: '*' and '>' are only allowed as
 * whole wildcard tokens of a pattern, never inside a literal token, and no token may contain
 * whitespace or control characters (nats.js does not check, and a space in a subject would be read
 * by the server as the start of a reply subject).
 */
import { InvalidSubjectError } from "./bus.js";

export const TOKEN_SEPARATOR = ".";
/** Matches exactly one token. */
export const WILDCARD_ONE = "*";
/** Matches one or more trailing tokens; only valid as the last token. */
export const WILDCARD_REST = ">";

const DOT = 0x2e;
const STAR = 0x2a;
const GREATER = 0x3e;
/** Space and everything below it are protocol separators or control characters. */
const LAST_CONTROL_OR_SPACE = 0x20;
const DEL = 0x7f;

/** True for a literal subject: what a message is published to. */
export function isSubject(subject: string): boolean {
  return scan(subject, false);
}

/** True for a subscription subject: a literal subject whose tokens may also be '*' or a final '>'. */
export function isSubjectPattern(pattern: string): boolean {
  return scan(pattern, true);
}

export function assertSubject(subject: string): void {
  if (!isSubject(subject)) throw new InvalidSubjectError(`invalid subject ${JSON.stringify(subject)}`);
}

export function assertSubjectPattern(pattern: string): void {
  if (!isSubjectPattern(pattern)) {
    throw new InvalidSubjectError(`invalid subject pattern ${JSON.stringify(pattern)}`);
  }
}

/** Queue group names follow literal subject rules (dots allowed, no wildcards, no whitespace). */
export function assertQueueName(queue: string): void {
  if (!isSubject(queue)) throw new InvalidSubjectError(`invalid queue group name ${JSON.stringify(queue)}`);
}

/** True when a pattern has a wildcard token, so it cannot be found by exact lookup. */
export function hasWildcard(pattern: string): boolean {
  return tokensOf(pattern).some((t) => t === WILDCARD_ONE || t === WILDCARD_REST);
}

export function tokensOf(subject: string): string[] {
  return subject.split(TOKEN_SEPARATOR);
}

/** Whether a tokenized pattern matches a tokenized literal subject, by NATS rules. */
export function patternMatches(pattern: readonly string[], subject: readonly string[]): boolean {
  const n = pattern.length;
  for (let i = 0; i < n; i++) {
    const p = pattern[i];
    if (p === WILDCARD_REST) return subject.length > i;
    if (i >= subject.length) return false;
    if (p !== WILDCARD_ONE && p !== subject[i]) return false;
  }
  return subject.length === n;
}

function scan(s: string, wildcards: boolean): boolean {
  const n = s.length;
  if (n === 0) return false;
  let tokenStart = 0;
  for (let i = 0; i <= n; i++) {
    const c = i < n ? s.charCodeAt(i) : DOT;
    if (c === DOT) {
      const len = i - tokenStart;
      if (len === 0) return false;
      if (len === 1) {
        const t = s.charCodeAt(tokenStart);
        if (t === STAR && !wildcards) return false;
        if (t === GREATER && (!wildcards || i !== n)) return false;
      }
      tokenStart = i + 1;
    } else if (c <= LAST_CONTROL_OR_SPACE || c === DEL) {
      return false;
    } else if ((c === STAR || c === GREATER) && (i !== tokenStart || nextIsInToken(s, i))) {
      // A wildcard character is only allowed as a whole token.
      return false;
    }
  }
  return true;
}

function nextIsInToken(s: string, i: number): boolean {
  return i + 1 < s.length && s.charCodeAt(i + 1) !== DOT;
}
