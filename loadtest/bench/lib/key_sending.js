/**
 * Idempotency keys as one DC's counter node sends them to the others, for key_import.js: keys and
 * AppliedKeys messages made the way an owner makes them, and the sending side's measures (its CPU
 * and heap per key sent and held). Needs `npm run build`.
 */
import { randomUUID } from "node:crypto";
import { encodeMessage, MAX_APPLIED_KEYS } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { systemClock } from "@livecount/runtime";
import { KeyReplication } from "../../../apps/counter/dist/key_replication.js";
import { round } from "./measure.js";

export const PARTITIONS = 256;
export const KEY_TTL_MS = 86_400_000;
/** HeldKeys' settings of a node with the defaults (a 250 ms DC heartbeat, a 15 s DC lease). */
export const HELD = {
  clock: systemClock,
  keysTaken: () => "acks",
  discovering: () => false,
  ackWaitMs: 2000,
  keepMs: () => 16_000,
  ttlMs: KEY_TTL_MS,
};

/** A page name of 30 characters, and a key as the other DC's owner sends it. */
export function restore(i) {
  const page = `news/2026/11/article-${String(i).padStart(9, "0")}`;
  const value = 1_000 + i;
  const payload = `{"value":${value},"updatedAt":1764547200000}`; // recent_keys.ts's answer
  return { page, key: randomUUID(), counter: "likes", delta: 1, payload };
}

/** `count` keys grouped by partition: Map<partition, KeyRestore[]>. */
export function keysByPartition(count, first = 0) {
  const byPartition = new Map();
  for (let i = first; i < first + count; i++) {
    const r = restore(i);
    const p = partitionOf(r.page, PARTITIONS);
    const list = byPartition.get(p);
    if (list === undefined) byPartition.set(p, [r]);
    else list.push(r);
  }
  return byPartition;
}

/** Messages numbered so far by `messagesOf`, as one sending node numbers them. */
let messagesMade = 0;

/** Encoded AppliedKeys messages of these keys, as the sending owner cuts them: [data, subject]. */
export function messagesOf(byPartition) {
  const messages = [];
  for (const [partition, keys] of byPartition) {
    for (let from = 0; from < keys.length; from += MAX_APPLIED_KEYS) {
      // Numbered as a node numbers them: the receiver acknowledges each once stored.
      const sender = { node: "dc1-n1", epoch: 1, seq: ++messagesMade };
      const msg = {
        type: "keys",
        dc: "dc1",
        partition,
        keys: keys.slice(from, from + MAX_APPLIED_KEYS),
        ...sender,
      };
      messages.push([encodeMessage(msg), `lc.keys.dc1.${partition}`]);
    }
  }
  return messages;
}

/**
 * dc1's sending KeyReplication, on a bus whose publish is `publish`, holding up to `maxKeys` for dc2,
 * which never acknowledges them.
 */
function sender(publish, { maxKeys }) {
  return new KeyReplication({
    dc: "dc1",
    node: "dc1-n1",
    bus: { subscribe: () => ({ unsubscribe() {} }), publish },
    store: {},
    logger: { warn() {}, error() {}, info() {} },
    metrics: { keysAcrossDcs: { inc() {} }, keysHeld: { set() {} } },
    partitions: PARTITIONS,
    keyTtlMs: KEY_TTL_MS,
    enabled: true,
    maxQueued: 0,
    mayBeHeard: () => true,
    resendCoalesceMs: 250,
    held: { ...HELD, peers: ["dc2"], maxKeys },
  });
}

/**
 * The sending owner's side: KeyReplication.send of rounds of `perRound` keys over random pages (one
 * call per commit round, as RecentKeys makes it), on a bus that only counts: µs of CPU per key.
 */
export function sendCost(perRound, rounds = 2000) {
  let messages = 0;
  const cpuPerKey = (held) => {
    const replication = sender(() => void messages++, held);
    const all = Array.from({ length: rounds }, (_, i) => keysByPartition(perRound, 5_000_000 + i * perRound));
    replication.send(all[0]); // warm-up
    messages = 0;
    const cpu0 = process.cpuUsage();
    for (const keys of all) replication.send(keys);
    const cpu = process.cpuUsage(cpu0);
    return round((cpu.user + cpu.system) / (perRound * rounds), 2);
  };
  // Holding nothing, then as a node holds what it sends until another DC acknowledged it (none does
  // here: up to the default 100,000 keys), in the same run.
  const holdingNothing = cpuPerKey({ maxKeys: 0 });
  const cpuUsPerKey = cpuPerKey({ maxKeys: 100_000 });
  return {
    keysPerRound: perRound,
    messagesPerRound: round(messages / rounds, 1),
    cpuUsPerKey,
    holdingNothing,
  };
}

/**
 * The sending owner's memory: heap bytes per key it holds for DCs that may miss them (HeldKeys: the
 * messages as sent), `keys` keys sent in rounds of `perRound` over random pages, none let go.
 */
export async function heldHeapPerKey(perRound, keys) {
  let replication = sender(() => {}, { maxKeys: keys });
  const rounds = Array.from({ length: Math.ceil(keys / perRound) }, (_, i) =>
    keysByPartition(perRound, 9_000_000 + i * perRound),
  );
  for (const keys of rounds) replication.send(keys);
  // What the node retains: the memory with it, less the memory once it is let go (the keys sent
  // stay referenced throughout).
  const used = () => {
    globalThis.gc();
    globalThis.gc();
    const m = process.memoryUsage();
    return m.heapUsed + m.arrayBuffers;
  };
  const withHeld = used();
  // Read after each measure, or V8 may free what a variable no longer read still names.
  if (!replication.sending) throw new Error("the replication stopped sending");
  replication = undefined;
  const without = used();
  return {
    keysPerRound: perRound,
    heldBytesPerKey: round((withHeld - without) / keys, 1),
    rounds: rounds.length,
  };
}
