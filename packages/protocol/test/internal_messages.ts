/** Valid internal messages of every type: the fixture the internal codec tests round-trip and corrupt. */
import type { Entries } from "@livecount/crdt";
import { VIEWERS_COUNTER, type InternalMessage } from "../src/index.js";

export const TS = 1_717_171_717_171;

/** One or more valid messages of every type, with record keys that are Object.prototype members. */
export const MESSAGES: readonly InternalMessage[] = [
  {
    type: "presence",
    gateway: "gw-1a2b",
    partition: 17,
    ops: [
      { page: "home", viewer: "v:abc", present: true },
      { page: "home", viewer: "s:gw-1a2b:42", present: false },
      { page: "home", viewer: "v:old", present: false, drop: true },
      { page: "home", viewer: "v:tabs", present: true, sockets: 3, active: false },
    ],
  },
  { type: "presence", gateway: "gw-1a2b", partition: 0, ops: [], hop: 1 },
  {
    type: "presence_sync",
    gateway: "gw-1a2b",
    partition: 255,
    pages: Object.fromEntries([
      ["home", ["v:a", "s:gw-1a2b:1"]],
      ["__proto__", ["v:b"]],
      ["constructor", []],
    ]),
  },
  {
    type: "presence_sync",
    gateway: "gw-1a2b",
    partition: 3,
    pages: Object.fromEntries([
      ["home", ["v:a", "v:b"]],
      ["__proto__", ["v:c"]],
    ]),
    sockets: Object.fromEntries([["home", [2, 1]]]),
    passive: Object.fromEntries([["__proto__", ["v:c"]]]),
    unvisited: Object.fromEntries([["home", ["v:b"]]]),
  },
  { type: "snapshot", page: "home" },
  { type: "window", page: "home", counter: "likes", seconds: 86_400 },
  { type: "window", page: "home", counter: "__proto__", seconds: 1, hop: 1 },
  { type: "window_total", page: "home", counter: "likes", seconds: 60, value: -3, ts: 1 },
  { type: "stats", page: "home" },
  {
    type: "page_stats",
    page: "home",
    counters: { "@viewers": { dc1: { p: 3, n: 1 } }, likes: { dc2: { p: 1, n: 0 } } },
    peak1h: 3,
    peak24h: 9,
    unique24h: 41,
    ts: 5,
  },
  { type: "snapshot", page: "home", hop: 2 },
  { type: "increment", page: "home", counter: "likes", delta: -3, key: "req-1" },
  {
    type: "increment",
    page: "home",
    counter: "__proto__",
    delta: Number.MAX_SAFE_INTEGER,
    key: "k".repeat(128),
    hop: 0,
  },
  { type: "ack" },
  {
    type: "page_state",
    page: "home",
    counters: Object.fromEntries([
      [VIEWERS_COUNTER, { dc1: { p: 5, n: 2 }, dc2: { p: 0, n: 0 } }],
      ["likes", { dc1: { p: 12, n: 0 } }],
      ["__proto__", Object.fromEntries([["__proto__", { p: 1, n: 1 }]])],
    ]),
    ts: TS,
  },
  { type: "page_state", page: "new", counters: {}, ts: 0 },
  { type: "incremented", page: "home", counter: "likes", value: -2, updatedAt: TS, duplicate: false },
  { type: "incremented", page: "home", counter: "likes", value: 7, updatedAt: TS, duplicate: true },
  { type: "error", code: "unavailable", message: "no counter node is live" },
  {
    type: "update",
    page: "home",
    dc: "dc-eu_1",
    counters: { [VIEWERS_COUNTER]: { p: 9, n: 3 }, likes: { p: Number.MAX_SAFE_INTEGER, n: 0 } },
    ts: TS,
  },
  { type: "gateway", gateway: "gw-1a2b", leaseMs: 10_000, state: "up" },
  { type: "gateway", gateway: "gw-1a2b", leaseMs: 10_000, state: "down" },
  {
    type: "gateway",
    gateway: "gw-1a2b",
    leaseMs: 10_000,
    state: "up",
    startedAt: 1_700_000_000_000,
    node: "gw",
  },
  { type: "node", node: "n-1", incarnation: "i-1", leaseMs: 6_000, state: "up" },
  { type: "node", node: "n-1", incarnation: "i-1", leaseMs: 6_000, state: "leaving" },
  { type: "dc", dc: "eu", node: "n-1", seq: 42, leaseMs: 15_000 },
  { type: "dc", dc: "eu", node: "n-1", seq: 43, leaseMs: 15_000, purgeBefore: TS },
  { type: "dc", dc: "eu", node: "n-1", seq: 44, leaseMs: 15_000, epoch: TS, heard: [] },
  {
    type: "dc",
    dc: "eu",
    node: "n-1",
    seq: 45,
    leaseMs: 15_000,
    epoch: TS,
    heard: [
      ["us", "n-1", TS - 1, 7, 7],
      ["us", "n-2", TS, 1, 9_000],
    ],
  },
  {
    type: "keys",
    dc: "eu",
    partition: 7,
    keys: [
      { page: "p", key: "k-1", counter: "likes", delta: -3, payload: '{"value":4,"updatedAt":5}' },
      { page: "p", key: "k-2", counter: "likes", delta: 0, payload: "{}", fingerprint: "reset:likes" },
    ],
  },
  { type: "purge", olderThanMs: 0 },
  { type: "purge", olderThanMs: 86_400_000 },
  { type: "purged", node: "n-1", before: TS, pages: 2, counters: 3, kept: 1, failed: 0, waiting: 5 },
  {
    type: "ae_summary",
    from: "us",
    to: "eu",
    digests: [
      [0, "0123456789abcdef"],
      [65_535, "0000000000000000"],
    ],
  },
  { type: "ae_summary", from: "us", to: "eu", digests: [], bootstrap: [3, 7] },
  {
    type: "ae_summary",
    from: "us",
    to: "eu",
    digests: [
      [0, "0123456789abcdef"],
      [9, "0000000000000000"],
    ],
    tombs: ["fedcba9876543210", "0000000000000000"],
  },
  {
    type: "ae_buckets",
    from: "eu",
    to: "us",
    partition: 3,
    digests: ["ffffffffffffffff", "0000000000000001"],
  },
  { type: "ae_buckets", from: "eu", to: "us", partition: 3, digests: [], bootstrap: true },
  { type: "ae_buckets", from: "eu", to: "us", partition: 3, digests: [], floor: 77, bootstrap: true },
  {
    type: "ae_buckets",
    from: "eu",
    to: "us",
    partition: 3,
    digests: [],
    bootstrap: true,
    senderLearning: true,
  },
  {
    type: "ae_entries",
    from: "us",
    to: "eu",
    partition: 3,
    pages: Object.fromEntries<Readonly<Record<string, Entries>>>([
      [
        "home",
        {
          [VIEWERS_COUNTER]: { us: { p: 3, n: 1 }, eu: { p: 9, n: 9 } },
          "@del:likes": { us: { p: 2, n: 0 } },
        },
      ],
      ["__proto__", { likes: { eu: { p: 1, n: 0 } } }],
    ]),
    pull: [0, 63],
  },
  { type: "ae_entries", from: "eu", to: "us", partition: 0, pages: {}, done: true },
  { type: "ae_entries", from: "eu", to: "us", partition: 0, pages: {}, done: true, floor: 1_234 },
  { type: "ae_entries", from: "eu", to: "us", partition: 0, pages: {}, done: true, senderLearning: true },
  {
    type: "updates",
    partition: 9,
    pages: Object.fromEntries<Readonly<Record<string, Entries>>>([
      [
        "home",
        { likes: { us: { p: 3, n: 1 }, eu: { p: 1, n: 0 } }, [VIEWERS_COUNTER]: { us: { p: 2, n: 2 } } },
      ],
      ["__proto__", { likes: { eu: { p: 1, n: 0 } } }],
    ]),
    ts: TS,
  },
  {
    type: "presence_pages",
    gateway: "gw-1a2b",
    partition: 17,
    pages: [
      // Joined (one active socket), left, dropped, three sockets none active, two sockets one active.
      ["home", ["v:abc", 3, "s:gw-1a2b:42", 0, "v:old", -1, "v:tabs", 6, "v:two", 5]],
      ["__proto__", ["v:b", 3]],
      ["constructor", ["v:c", 0]],
    ],
    // Joins past their address's budget of new visitors: viewers, not unique visitors.
    unvisited: [["home", ["v:abc", "v:tabs"]]],
  },
  { type: "presence_pages", gateway: "gw-1a2b", partition: 0, pages: [], hop: 1 },
];
