/** Decoders of the anti-entropy messages between data centers (internal.ts). */
import { isInternalId, isPageId } from "./ids.js";
import type { Entries } from "@livecount/crdt";
import { MAX_AE_PAGES, type AntiEntropyMessage, type Digest } from "./anti_entropy_messages.js";
import {
  entriesOf,
  field,
  fieldsOf,
  isBoolean,
  isCounterKey,
  listOf,
  malformed,
  naturalOf,
  partitionListOf,
  partitionOf,
  pageRecordOf,
  recordOf,
  type Fields,
} from "./internal_fields.js";

/** Most buckets a partition has (the store's DIGEST_BUCKETS is within this). */
const MAX_BUCKETS = 4096;

/** A digest is 16 lowercase hex digits. */
export function isDigest(v: unknown): v is Digest {
  return typeof v === "string" && /^[0-9a-f]{16}$/.test(v);
}

function digestOf(v: unknown): Digest {
  if (!isDigest(v)) malformed("digest is malformed");
  return v;
}

function bucketOf(v: unknown): number {
  if (!Number.isSafeInteger(v) || (v as number) < 0 || (v as number) >= MAX_BUCKETS)
    malformed("bucket is malformed");
  return v as number;
}

function optional<T>(m: Fields, key: string, decode: (v: unknown) => T): { [k: string]: T } | undefined {
  const v = m.get(key);
  return v === undefined ? undefined : { [key]: decode(v) };
}

function booleanOf(v: unknown, name: string): boolean {
  if (!isBoolean(v)) malformed(`${name} must be a boolean`);
  return v;
}

/** Pages with every DC's entries of each counter (ae_entries, updates), at most MAX_AE_PAGES. */
export function pagesOf(v: unknown): Record<string, Record<string, Entries>> {
  const pages = fieldsOf(v, "pages");
  if (pages.size > MAX_AE_PAGES) malformed(`at most ${MAX_AE_PAGES} pages per message`);
  return pageRecordOf(
    pages,
    isPageId,
    (record) => recordOf(record, isCounterKey, entriesOf, "counters"),
    "pages",
  );
}

export const ANTI_ENTROPY_DECODERS: ReadonlyArray<readonly [string, (m: Fields) => AntiEntropyMessage]> = [
  [
    "ae_summary",
    (m) => {
      const digests = listOf(
        m.get("digests"),
        (pair) => {
          if (!Array.isArray(pair) || pair.length !== 2)
            malformed("digests must be [partition, digest] pairs");
          return [partitionOf(pair[0]), digestOf(pair[1])] as const;
        },
        "digests",
      );
      const tombs = optional(m, "tombs", (v) => listOf(v, digestOf, "tombs"));
      if (tombs !== undefined && tombs.tombs!.length !== digests.length)
        malformed("tombs must have one digest per partition of digests");
      return {
        type: "ae_summary",
        from: field(m, "from", isInternalId),
        to: field(m, "to", isInternalId),
        digests,
        ...tombs,
        ...optional(m, "bootstrap", partitionListOf),
      };
    },
  ],
  [
    "ae_buckets",
    (m) => {
      const digests = m.get("digests");
      if (Array.isArray(digests) && digests.length > MAX_BUCKETS) malformed("too many buckets");
      return {
        type: "ae_buckets",
        from: field(m, "from", isInternalId),
        to: field(m, "to", isInternalId),
        partition: partitionOf(m.get("partition")),
        digests: listOf(digests, digestOf, "digests"),
        ...optional(m, "floor", naturalOf),
        ...optional(m, "bootstrap", (v) => booleanOf(v, "bootstrap")),
        ...optional(m, "senderLearning", (v) => booleanOf(v, "senderLearning")),
      };
    },
  ],
  [
    "ae_entries",
    (m) => ({
      type: "ae_entries",
      from: field(m, "from", isInternalId),
      to: field(m, "to", isInternalId),
      partition: partitionOf(m.get("partition")),
      pages: pagesOf(m.get("pages")),
      ...optional(m, "pull", (v) => {
        if (Array.isArray(v) && v.length > MAX_BUCKETS) malformed("too many buckets");
        return listOf(v, bucketOf, "pull");
      }),
      ...optional(m, "done", (v) => booleanOf(v, "done")),
      ...optional(m, "floor", naturalOf),
      ...optional(m, "senderLearning", (v) => booleanOf(v, "senderLearning")),
    }),
  ],
];
