/**
 * The baseline for the counter node benchmark: the obvious presence counter. It serves the same
 * presence requests over NATS (`presence_pages`, or `presence` batches; decoded and validated with
 * the same codec as the counter node) and keeps each page's viewers as a Redis set, one command per event, awaiting each
 * (SADD on join, SREM on leave; the count is SCARD). No actors, no batching, no grace window.
 *
 * Forked by the counter bench with NATS_URL, REDIS_URL and SUBJECT in its environment; it sends
 * {type: "ready"} once subscribed and answers {cmd: "stats"} with {type: "stats", commands, events}.
 */
import { decodeMessage, encodeMessage } from "@livecount/protocol";
import { Redis } from "ioredis";
import { connect } from "nats";

const { NATS_URL, REDIS_URL, SUBJECT, KEY_PREFIX = "naive:page:" } = process.env;
const redis = new Redis(REDIS_URL, { enableAutoPipelining: false });
const nc = await connect({ servers: NATS_URL, name: "bench-naive-counter" });
const ACK = encodeMessage({ type: "ack" });
let commands = 0;
let events = 0;

/** One event: SADD on a join, SREM on a leave, awaited. */
async function apply(page, viewer, present) {
  const key = KEY_PREFIX + page;
  if (present) await redis.sadd(key, viewer);
  else await redis.srem(key, viewer);
  commands++;
  events++;
}

async function handle(msg) {
  let request;
  try {
    request = decodeMessage(msg.data);
  } catch (err) {
    msg.respond(encodeMessage({ type: "error", code: "bad_frame", message: String(err.message) }));
    return;
  }
  if (request.type === "presence") {
    for (const op of request.ops) await apply(op.page, op.viewer, op.present);
  } else if (request.type === "presence_pages") {
    for (const [page, transitions] of request.pages) {
      for (let i = 0; i < transitions.length; i += 2)
        await apply(page, transitions[i], transitions[i + 1] > 0);
    }
  } else {
    msg.respond(encodeMessage({ type: "error", code: "unknown_type", message: request.type }));
    return;
  }
  msg.respond(ACK);
}

nc.subscribe(SUBJECT, {
  callback: (err, msg) => {
    if (err) {
      console.error(err);
      return;
    }
    handle(msg).catch((e) => {
      console.error(e);
      msg.respond(encodeMessage({ type: "error", code: "internal", message: String(e.message) }));
    });
  },
});
await nc.flush();
await redis.ping();

process.on("message", (msg) => {
  if (msg?.cmd === "stats") process.send({ type: "stats", commands, events });
});
process.on("disconnect", () => process.exit(0));
process.send({ type: "ready" });
