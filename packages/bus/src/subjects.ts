/**
 * The livecount subject design. Every subject starts with `lc` and a kind token, so kinds can never
 * collide, and every variable token is either a validated id token (`[A-Za-z0-9_-]`, 1..64, the same
 * rule as LIVECOUNT_DC and node ids in the config) or a page id encoded as base64url.
 *
 * | Subject                | Pattern        | Payload (internal.ts)        | From -> to                                      |
 * |------------------------|----------------|------------------------------|-------------------------------------------------|
 * | `lc.page.<page64>`     | publish        | PageUpdate                   | page owner -> watching gateways, every DC       |
 * | `lc.node.<dc>.<node>`  | request/reply  | NodeRequest -> NodeReply     | gateways, publishers, peers -> one counter node |
 * | `lc.nodes.<dc>`        | publish        | NodeHeartbeat                | counter nodes -> ring members of the DC         |
 * | `lc.gateways.<dc>`     | publish        | GatewayHeartbeat             | gateways -> counter nodes of the DC             |
 *
 * `<page64>` is the page id's UTF-8 bytes in base64url without padding: its alphabet has no '.',
 * '*', '>' or whitespace, so a page id can never add a token or become a wildcard (a page named '>'
 * or 'a.*' gets a subject of its own), and the encoding is injective. A protocol page id (128
 * printable ASCII characters at most) gives a token of at most 171 characters.
 *
 * Page updates are not scoped by DC: they must reach every DC (through NATS gateways in a super
 * cluster). Interest is per subject, so a DC only receives the pages somebody there subscribed to.
 */
import { InvalidSubjectError } from "./bus.js";

export const SUBJECT_ROOT = "lc";

const PAGE_PREFIX = `${SUBJECT_ROOT}.page.`;
const NODE_PREFIX = `${SUBJECT_ROOT}.node.`;
const NODES_PREFIX = `${SUBJECT_ROOT}.nodes.`;
const GATEWAYS_PREFIX = `${SUBJECT_ROOT}.gateways.`;

/** Longest dc or node id, in characters; the same limit as the config's `readToken`. */
export const ID_TOKEN_MAX_LENGTH = 64;
const ID_TOKEN = /^[A-Za-z0-9_-]+$/;
const BASE64URL_TOKEN = /^[A-Za-z0-9_-]+$/;

/**
 * Throws InvalidSubjectError unless `value` is 1..64 of `[A-Za-z0-9_-]`. `name` says which id it is
 * ("dc", "node") in the message.
 */
export function assertToken(name: string, value: string): void {
  if (value.length === 0 || value.length > ID_TOKEN_MAX_LENGTH || !ID_TOKEN.test(value)) {
    throw new InvalidSubjectError(
      `${name} must be 1..${ID_TOKEN_MAX_LENGTH} of [A-Za-z0-9_-], got ${JSON.stringify(value)}`,
    );
  }
}

/** Page updates of one page, in every DC. Throws InvalidSubjectError for an empty page id. */
export function pageSubject(page: string): string {
  if (page.length === 0) throw new InvalidSubjectError("page id must not be empty");
  return PAGE_PREFIX + Buffer.from(page, "utf8").toString("base64url");
}

/** The page id of a page subject, or undefined when `subject` is not one `pageSubject` makes. */
export function pageFromSubject(subject: string): string | undefined {
  if (!subject.startsWith(PAGE_PREFIX)) return undefined;
  const token = subject.slice(PAGE_PREFIX.length);
  if (!BASE64URL_TOKEN.test(token)) return undefined;
  const page = Buffer.from(token, "base64url").toString("utf8");
  // Decoding is lenient (stray bits, invalid UTF-8): only accept what the encoder would produce.
  return page.length > 0 && pageSubject(page) === subject ? page : undefined;
}

/** Requests to one counter node of a DC (served by that node alone). */
export function nodeSubject(dc: string, node: string): string {
  assertToken("dc", dc);
  assertToken("node", node);
  return `${NODE_PREFIX}${dc}.${node}`;
}

/** Counter node heartbeats of a DC. */
export function nodesSubject(dc: string): string {
  assertToken("dc", dc);
  return NODES_PREFIX + dc;
}

/** Gateway heartbeats of a DC. */
export function gatewaysSubject(dc: string): string {
  assertToken("dc", dc);
  return GATEWAYS_PREFIX + dc;
}
