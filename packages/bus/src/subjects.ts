/**
 * The livecount subject design. Every subject starts with `lc` and a kind token, so kinds can never
 * collide, and every variable token is either a validated id token (`[A-Za-z0-9_-]`, 1..64, the same
 * rule as LIVECOUNT_DC and node ids in the config) or a page id encoded as base64url.
 *
 * | Subject                | Pattern        | Payload (internal.ts)        | From -> to                                      |
 * |------------------------|----------------|------------------------------|-------------------------------------------------|
 * | `lc.page.<part>.<page64>` | publish     | PageUpdate                   | page owner -> watching gateways and the page's owners, every DC |
 * | `lc.dcupdates.<dc>.<part>` | publish    | PageUpdates                  | a counter node of `<dc>` -> gateways of `<dc>` watching pages of `<part>` |
 * | `lc.keys.<dc>.<part>`  | publish        | AppliedKeys                  | a partition's owner in `<dc>` -> one counter node per DC (queue group); `<dc>`'s own drop it unread |
 * | `lc.keysack.<dc>.<node>` | publish      | KeysAck                      | the counter node of another DC that stored keys -> their sender, `<node>` of `<dc>` |
 * | `lc.keysmissed.<dc>.<from>` | publish   | empty                        | a counter node of `<from>` that heard `<dc>` again -> every counter node of `<dc>`: send your held keys again |
 * | `lc.dcs`               | publish        | DcHeartbeat                  | counter nodes -> every process, every DC        |
 * | `lc.ae.<dc>`           | publish        | AeSummary                    | counter nodes -> the counter nodes of `<dc>`    |
 * | `lc.ae.<dc>.<part>`    | publish        | AeBuckets, AeEntries         | a partition's owner -> its owner in `<dc>`      |
 * | `lc.node.<dc>.<node>`  | request/reply  | NodeRequest -> NodeReply     | gateways, publishers, peers -> one counter node |
 * | `lc.nodes.<dc>`        | publish        | NodeHeartbeat                | counter nodes -> ring members of the DC         |
 * | `lc.gateways.<dc>`     | publish        | GatewayHeartbeat             | gateways -> counter nodes of the DC             |
 * | `lc.gateway.<dc>.<gw64>` | request/reply | empty -> empty            | counter nodes -> one gateway process: alive?    |
 * | `lc.gatewayid.<dc>.<node>` | request/reply | empty -> GatewayIdHolder | a starting gateway -> the one running under its node id |
 *
 * `<page64>` is the page id's UTF-8 bytes in base64url without padding: its alphabet has no '.',
 * '*', '>' or whitespace, so a page id can never add a token or become a wildcard (a page named '>'
 * or 'a.*' gets a subject of its own), and the encoding is injective. A protocol page id (128
 * printable ASCII characters at most) gives a token of at most 171 characters.
 *
 * Page updates are not scoped by DC: they must reach every DC (through NATS gateways in a super
 * cluster). Interest is per subject, so a DC only receives the pages somebody there subscribed to.
 * `<part>` is the page's partition: an owner subscribes to `lc.page.<part>.*` for each partition it
 * owns and so receives other DCs' entries of its pages, with one subscription per partition.
 *
 * `lc.dcupdates.<dc>.<part>` carries what a DC learnt by anti-entropy (any DC's entries, merged into
 * its store) to its own gateways, many pages per message: every other DC has those entries already,
 * and only that DC's gateways subscribe to it, so a heal's worth of updates never crosses a NATS
 * gateway link back. A gateway subscribes per partition it watches pages of.
 */
import { InvalidSubjectError } from "./bus.js";

export const SUBJECT_ROOT = "lc";

const PAGE_PREFIX = `${SUBJECT_ROOT}.page.`;
const PARTITION_TOKEN = /^(0|[1-9][0-9]{0,8})$/;
const NODE_PREFIX = `${SUBJECT_ROOT}.node.`;
const NODES_PREFIX = `${SUBJECT_ROOT}.nodes.`;
const GATEWAYS_PREFIX = `${SUBJECT_ROOT}.gateways.`;
const GATEWAY_PREFIX = `${SUBJECT_ROOT}.gateway.`;
const GATEWAY_ID_PREFIX = `${SUBJECT_ROOT}.gatewayid.`;
const AE_PREFIX = `${SUBJECT_ROOT}.ae.`;
const DC_UPDATES_PREFIX = `${SUBJECT_ROOT}.dcupdates.`;
const KEYS_PREFIX = `${SUBJECT_ROOT}.keys.`;

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

function assertPartition(partition: number): void {
  if (!Number.isSafeInteger(partition) || partition < 0 || partition > 999_999_999) {
    throw new InvalidSubjectError(`partition must be a non-negative integer, got ${partition}`);
  }
}

/**
 * Page updates of one page (in partition `partition`), in every DC. Throws InvalidSubjectError for
 * an empty page id or a bad partition.
 */
export function pageSubject(page: string, partition: number): string {
  if (page.length === 0) throw new InvalidSubjectError("page id must not be empty");
  assertPartition(partition);
  return `${PAGE_PREFIX}${partition}.${Buffer.from(page, "utf8").toString("base64url")}`;
}

/**
 * Updates of many pages of one partition for the gateways of one DC only: entries that DC's counter
 * nodes learnt by anti-entropy. Throws InvalidSubjectError for a bad dc or partition.
 */
export function dcUpdatesSubject(dc: string, partition: number): string {
  assertToken("dc", dc);
  assertPartition(partition);
  return `${DC_UPDATES_PREFIX}${dc}.${partition}`;
}

/** Every page update of one partition: what the partition's owners subscribe to. */
export function partitionPagesSubject(partition: number): string {
  assertPartition(partition);
  return `${PAGE_PREFIX}${partition}.*`;
}

/**
 * The idempotency keys of changes answered on pages of `partition` by its owner in `dc`, for the
 * other DCs (a retry that lands in another DC is answered as the change it repeats). The sending DC
 * is in the subject, so its own nodes drop their own without decoding them.
 */
export function partitionKeysSubject(dc: string, partition: number): string {
  assertToken("dc", dc);
  assertPartition(partition);
  return `${KEYS_PREFIX}${dc}.${partition}`;
}

/** Every DC's keys of every partition: what one counter node per DC takes, as a queue group. */
export const KEYS_SUBJECTS = `${KEYS_PREFIX}*.*`;

/** The sending DC's token of a keys subject (`partitionKeysSubject`), or undefined. */
export function keysSubjectDc(subject: string): string | undefined {
  if (!subject.startsWith(KEYS_PREFIX)) return undefined;
  const dot = subject.indexOf(".", KEYS_PREFIX.length);
  return dot < 0 ? undefined : subject.slice(KEYS_PREFIX.length, dot);
}

/**
 * Where the node of another DC that stored a keys message acknowledges it to its sender, node `node`
 * of `dc` (KeysAck): the sender holds what it sent until each DC acknowledged it.
 */
export function keysAckSubject(dc: string, node: string): string {
  assertToken("dc", dc);
  assertToken("node", node);
  return `${SUBJECT_ROOT}.keysack.${dc}.${node}`;
}

const KEYS_MISSED_PREFIX = `${SUBJECT_ROOT}.keysmissed.`;

/**
 * A DC (`from`) that hears `dc` again after a cut, or after a gap in its heartbeats, asks `dc`'s
 * counter nodes here to send again the keys they hold: their own resend, when they hear `from`
 * again, may cross the link before it carries their way. A node sends again what `from` has not
 * acknowledged (everything it holds, to a DC of a release before KeysAck: HeldKeys). Empty payload.
 */
export function keysMissedSubject(dc: string, from: string): string {
  assertToken("dc", dc);
  assertToken("dc", from);
  return `${KEYS_MISSED_PREFIX}${dc}.${from}`;
}

/** What every counter node of `dc` subscribes to (no queue group: each holds what it sent). */
export function keysMissedSubjects(dc: string): string {
  assertToken("dc", dc);
  return `${KEYS_MISSED_PREFIX}${dc}.*`;
}

/** The asking DC of a `keysMissedSubject`, or undefined when `subject` is not one. */
export function keysMissedFrom(subject: string): string | undefined {
  if (!subject.startsWith(KEYS_MISSED_PREFIX)) return undefined;
  const rest = subject.slice(KEYS_MISSED_PREFIX.length);
  const dot = rest.indexOf(".");
  const from = dot < 0 ? "" : rest.slice(dot + 1);
  return from.length <= ID_TOKEN_MAX_LENGTH && ID_TOKEN.test(from) ? from : undefined;
}

/** The page id of a page subject, or undefined when `subject` is not one `pageSubject` makes. */
export function pageFromSubject(subject: string): string | undefined {
  if (!subject.startsWith(PAGE_PREFIX)) return undefined;
  const rest = subject.slice(PAGE_PREFIX.length);
  const dot = rest.indexOf(".");
  if (dot < 0) return undefined;
  const partition = rest.slice(0, dot);
  const token = rest.slice(dot + 1);
  if (!PARTITION_TOKEN.test(partition) || !BASE64URL_TOKEN.test(token)) return undefined;
  const page = Buffer.from(token, "base64url").toString("utf8");
  // Decoding is lenient (stray bits, invalid UTF-8): only accept what the encoder would produce.
  return page.length > 0 && pageSubject(page, Number(partition)) === subject ? page : undefined;
}

/** DC heartbeats, shared by every DC. */
export const DCS_SUBJECT = `${SUBJECT_ROOT}.dcs`;

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

/**
 * One gateway incarnation of a DC, which answers every request while it runs: `<gw64>` is its id
 * (any printable ASCII, as heartbeats carry it) in base64url, as page ids are encoded. A request
 * that finds no responder there proves the process gone (its broker connection closed with it).
 */
export function gatewaySubject(dc: string, gateway: string): string {
  assertToken("dc", dc);
  if (gateway.length === 0) throw new InvalidSubjectError("gateway id must not be empty");
  return `${GATEWAY_PREFIX}${dc}.${Buffer.from(gateway, "utf8").toString("base64url")}`;
}

/**
 * The gateway process running under node id `node` of `dc` answers here: a gateway starting under
 * the same id asks before it takes sockets (one process per id).
 */
export function gatewayIdSubject(dc: string, node: string): string {
  assertToken("dc", dc);
  assertToken("node", node);
  return `${GATEWAY_ID_PREFIX}${dc}.${node}`;
}

/** Anti-entropy summaries for the counter nodes of `dc` (each compares the partitions it holds). */
export function antiEntropySubject(dc: string): string {
  assertToken("dc", dc);
  return AE_PREFIX + dc;
}

/** Anti-entropy buckets and entries for the owner of `partition` in `dc`. */
export function antiEntropyPartitionSubject(dc: string, partition: number): string {
  assertToken("dc", dc);
  if (!Number.isSafeInteger(partition) || partition < 0)
    throw new InvalidSubjectError(`bad partition ${partition}`);
  return `${AE_PREFIX}${dc}.${partition}`;
}
