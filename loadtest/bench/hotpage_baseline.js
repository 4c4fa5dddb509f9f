/**
 * The baseline of the hot-page benchmark: the plain way to count exactly-once increments. One
 * process, a uWebSockets.js HTTP server answering `PUT /v1/pages/{page}/counter` as protocol v1
 * does (publisher key, `Idempotency-Key`, body `{"action","counter","by"}`), and per request one
 * EVALSHA of a Lua script on Redis:
 *
 *   SET <idem key> 1 NX EX <ttl>, and only when it was set, HINCRBY <page> <counter> <delta>
 *
 * answering the new value as JSON; a replayed key answers the current value with
 * `idempotent-replayed: true` and counts nothing. ioredis with default options (one command per
 * request, no auto-pipelining). No gateway -> owner hop, no actors, no replication, no
 * publish: what livecount's one-DC path is compared against.
 *
 * Environment: PORT, REDIS_URL, PUBLISHER_KEY, IDEMPOTENCY_TTL_S (default 86400). Forked by the
 * bench: sends {type: "listening", port} once it listens.
 */
import { Redis } from "ioredis";
import * as uWS from "uWebSockets.js";

const PORT = Number(process.env.PORT ?? 0);
const TTL_S = Number(process.env.IDEMPOTENCY_TTL_S ?? 86_400);
const BEARER = `Bearer ${process.env.PUBLISHER_KEY ?? ""}`;
const MAX_BODY_BYTES = 4096;
const PAGE_COUNTER = /^\/v1\/pages\/(.+)\/counter$/;
const COUNTER = /^[A-Za-z0-9_:.-]{1,64}$/;
const PRINTABLE = /^[\x21-\x7e]{1,128}$/;

/** Returns {1, value} when the key was new and the counter moved, {0, value} for a replay. */
const SCRIPT = `
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return {1, redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[3])}
end
return {0, tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')}
`;

const redis = new Redis(process.env.REDIS_URL);
const sha = await redis.script("LOAD", SCRIPT);

function answer(res, status, body, headers = {}) {
  if (res.aborted) return;
  res.cork(() => {
    res.writeStatus(status);
    res.writeHeader("content-type", "application/json");
    res.writeHeader("cache-control", "no-store");
    for (const [k, v] of Object.entries(headers)) res.writeHeader(k, v);
    res.end(JSON.stringify(body));
  });
}

function fail(res, status, code, message) {
  answer(res, status, { error: { code, message } });
}

function readBody(res, done) {
  const chunks = [];
  let size = 0;
  res.onData((chunk, isLast) => {
    size += chunk.byteLength;
    if (size > MAX_BODY_BYTES) return size - chunk.byteLength <= MAX_BODY_BYTES && done(undefined);
    // uWS reuses the chunk's memory after this callback returns: copy it.
    chunks.push(Buffer.from(chunk.slice(0)));
    if (isLast) done(Buffer.concat(chunks));
  });
}

async function increment(res, page, key, raw) {
  let body;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch {
    return fail(res, "400 Bad Request", "invalid_body", "body is not valid JSON");
  }
  const { action, counter, by = 1 } = body ?? {};
  if ((action !== "increment" && action !== "decrement") || !COUNTER.test(counter ?? ""))
    return fail(res, "400 Bad Request", "invalid_body", "action or counter is invalid");
  if (!Number.isSafeInteger(by) || by < 1 || by > 1e9)
    return fail(res, "400 Bad Request", "invalid_body", "by must be an integer from 1 to 10^9");
  const delta = action === "increment" ? by : -by;
  try {
    const [fresh, value] = await redis.evalsha(
      sha,
      2,
      `idem:${page}:${key}`,
      `page:${page}`,
      TTL_S,
      counter,
      delta,
    );
    answer(
      res,
      "200 OK",
      { page, counter, value, updated_at: Date.now() },
      fresh === 1 ? {} : { "idempotent-replayed": "true" },
    );
  } catch {
    fail(res, "503 Service Unavailable", "unavailable", "the store did not answer; retry");
  }
}

const app = uWS.App();
app.put("/*", (res, req) => {
  res.onAborted(() => (res.aborted = true));
  const m = PAGE_COUNTER.exec(req.getUrl());
  let page;
  try {
    page = m === null ? undefined : decodeURIComponent(m[1]);
  } catch {
    page = undefined;
  }
  if (page === undefined || !PRINTABLE.test(page))
    return fail(res, "400 Bad Request", "invalid_page", "page id is invalid");
  if (req.getHeader("authorization") !== BEARER)
    return fail(res, "401 Unauthorized", "unauthorized", "a publisher key is required");
  const key = req.getHeader("idempotency-key");
  if (!PRINTABLE.test(key))
    return fail(res, "400 Bad Request", "invalid_idempotency_key", "Idempotency-Key is required");
  readBody(res, (raw) => {
    if (raw === undefined) return fail(res, "413 Payload Too Large", "payload_too_large", "body too large");
    void increment(res, page, key, raw);
  });
});
app.get("/healthz", (res) => answer(res, "200 OK", { status: "ok" }));
app.any("/*", (res) => fail(res, "404 Not Found", "not_found", "no such route"));
app.listen("127.0.0.1", PORT, (socket) => {
  if (socket === false) {
    console.error(`cannot listen on ${PORT}`);
    process.exit(1);
  }
  process.send?.({ type: "listening", port: uWS.us_socket_local_port(socket) });
});
