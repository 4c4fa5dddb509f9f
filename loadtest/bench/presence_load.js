/**
 * Presence load over real NATS, in its own process: plays many gateways sending presence batches
 * (internal protocol, msgpack) to one subject, the way apps/gateway's PresenceForwarder does: per
 * (gateway, partition) one batch in flight, batches of one partition's pages only, as
 * `presence_pages` (grouped by page, as gateways send them) or, with `format: "ops"`, as the
 * `presence` batches of earlier gateways (one map per op).
 * Viewers join and leave many pages; the driver keeps the truth (who is present where) so the
 * bench can check afterwards that the counter applied every event.
 *
 * Forked by the counter bench: it sends {cmd: "run", config} over IPC and gets back
 * {type: "done", events, batches, errors, elapsedMs, truth: {page: viewers}}.
 *
 * The event stream is a pure function of the config (seeded PRNG), so the livecount counter node
 * and the naive baseline get the very same events.
 */
import { gatewaysSubject } from "@livecount/bus";
import { HOLD_LEFT, decodeMessage, encodeMessage, holdCode } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { connect } from "nats";
import { performance } from "node:perf_hooks";
import { prng } from "./lib/prng.js";

/** Gateways heartbeat this often; the lease they announce is long so a slow run never expires them. */
const HEARTBEAT_MS = 2000;
const HEARTBEAT_LEASE_MS = 60_000;
const REQUEST_TIMEOUT_MS = 60_000;

/**
 * @typedef {object} LoadConfig
 * @property {string} natsUrl
 * @property {string} subject       request subject (the counter node's, or the naive baseline's)
 * @property {string} dc
 * @property {number} events        presence ops to send in total
 * @property {number} pages         distinct pages, spread over all partitions
 * @property {number} partitions    must match the counter's LIVECOUNT_PARTITIONS
 * @property {number} gateways      simulated gateways (distinct incarnations, distinct viewers)
 * @property {number} batchMin      ops per batch, uniform in [batchMin, batchMax]
 * @property {number} batchMax
 * @property {number} inflight      batches in flight at once, over all (gateway, partition) slots
 * @property {number} targetViewers per gateway and page: below it joins are likelier than leaves
 * @property {number} seed
 * @property {number} maxSeconds    stop early (reported) if the target is too slow
 * @property {"pages" | "ops"} [format] presence_pages (default) or presence batches
 */

/** A batch's ops as a request in `format`; the same transitions, in the same order per page. */
function batchMessage(format, gateway, partition, ops) {
  if (format === "ops") return { type: "presence", gateway, partition, ops };
  const byPage = new Map();
  for (const { page, viewer, present } of ops) {
    let transitions = byPage.get(page);
    if (transitions === undefined) byPage.set(page, (transitions = []));
    transitions.push(viewer, present ? holdCode(1, true) : HOLD_LEFT);
  }
  return { type: "presence_pages", gateway, partition, pages: [...byPage] };
}

/** @param {LoadConfig} c */
async function run(c) {
  const rand = prng(c.seed);
  const nc = await connect({ servers: c.natsUrl, name: "bench-presence-load" });
  const pageNames = Array.from({ length: c.pages }, (_, i) => `bench-page-${i}`);
  /** partition -> indexes of its pages */
  const byPartition = Array.from({ length: c.partitions }, () => []);
  pageNames.forEach((page, i) => byPartition[partitionOf(page, c.partitions)].push(i));
  const partitions = byPartition.map((list, p) => (list.length > 0 ? p : -1)).filter((p) => p >= 0);
  const gatewayIds = Array.from({ length: c.gateways }, (_, g) => `bench-gw-${g}`);
  /** present[g][pageIndex] = viewer keys gateway g holds on that page */
  const present = gatewayIds.map(() => pageNames.map(() => []));
  const busy = new Uint8Array(c.gateways * c.partitions);
  let seq = 0;

  const beat = () => {
    for (const gateway of gatewayIds) {
      nc.publish(
        gatewaysSubject(c.dc),
        encodeMessage({ type: "gateway", gateway, leaseMs: HEARTBEAT_LEASE_MS, state: "up" }),
      );
    }
  };
  beat();
  const heartbeat = setInterval(beat, HEARTBEAT_MS);

  /** Builds the next batch for a free (gateway, partition) slot; marks the slot busy. */
  const nextBatch = (remaining) => {
    let g, p, slot;
    for (;;) {
      g = Math.floor(rand() * c.gateways);
      p = partitions[Math.floor(rand() * partitions.length)];
      slot = g * c.partitions + p;
      if (busy[slot] === 0) break;
    }
    busy[slot] = 1;
    const size = Math.min(remaining, c.batchMin + Math.floor(rand() * (c.batchMax - c.batchMin + 1)));
    const pagesHere = byPartition[p];
    const ops = new Array(size);
    for (let i = 0; i < size; i++) {
      const pageIndex = pagesHere[Math.floor(rand() * pagesHere.length)];
      const held = present[g][pageIndex];
      const join = held.length === 0 || rand() < (held.length < c.targetViewers ? 0.6 : 0.4);
      if (join) {
        const viewer = `v:g${g}.${seq++}`;
        held.push(viewer);
        ops[i] = { page: pageNames[pageIndex], viewer, present: true };
      } else {
        const k = Math.floor(rand() * held.length);
        const viewer = held[k];
        held[k] = held[held.length - 1];
        held.pop();
        ops[i] = { page: pageNames[pageIndex], viewer, present: false };
      }
    }
    return {
      slot,
      size,
      data: encodeMessage(batchMessage(c.format ?? "pages", gatewayIds[g], p, ops)),
    };
  };

  let sent = 0;
  let batches = 0;
  let errors = 0;
  let firstError;
  const started = performance.now();
  const deadline = started + c.maxSeconds * 1000;
  let stoppedEarly = false;

  const lane = async () => {
    while (sent < c.events) {
      if (performance.now() > deadline) {
        stoppedEarly = true;
        return;
      }
      const { slot, size, data } = nextBatch(c.events - sent);
      sent += size;
      batches++;
      try {
        const reply = decodeMessage(
          (await nc.request(c.subject, data, { timeout: REQUEST_TIMEOUT_MS })).data,
        );
        if (reply.type !== "ack") {
          errors++;
          firstError ??= `${reply.type}: ${reply.code ?? ""} ${reply.message ?? ""}`;
        }
      } catch (err) {
        errors++;
        firstError ??= String(err?.message ?? err);
      } finally {
        busy[slot] = 0;
      }
    }
  };
  await Promise.all(Array.from({ length: c.inflight }, () => lane()));
  const elapsedMs = performance.now() - started;
  clearInterval(heartbeat);
  await nc.flush();
  await nc.close();

  const truth = {};
  pageNames.forEach((page, i) => {
    let n = 0;
    for (let g = 0; g < c.gateways; g++) n += present[g][i].length;
    truth[page] = n;
  });
  return { events: sent, batches, errors, firstError, elapsedMs, stoppedEarly, truth };
}

process.on("message", (msg) => {
  if (msg?.cmd !== "run") return;
  run(msg.config).then(
    (result) => process.send({ type: "done", ...result }),
    (err) => process.send({ type: "error", message: String(err?.stack ?? err) }),
  );
});
process.on("disconnect", () => process.exit(0));
