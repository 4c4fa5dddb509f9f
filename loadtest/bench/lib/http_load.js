/**
 * Closed-loop HTTP load for the hot-page benchmark: N keep-alive connections, each sending its next
 * `PUT` as soon as the previous one is answered, every request with its own `Idempotency-Key`
 * (`<prefix>-<thread>-<seq>`, seq from 1). Driven by wrk when installed (a Lua script makes the keys
 * and counts 2xx answers per thread), else by Node's http client (which saturates a core at 64
 * connections and so flatters the slower server: the result says which driver ran).
 *
 * Both report the same shape: {driver, durationS, sent: [per thread], ok, failed, requestsPerS,
 * p50Ms, p99Ms, firstError?}. Keys sent by thread t are `<prefix>-<t>-1 .. <prefix>-<t>-<sent[t]>`.
 */
import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { summarize } from "./measure.js";
import { binary } from "./processes.js";

/** wrk's path, or undefined when it is not installed. */
export function wrkBinary() {
  try {
    return binary("wrk", "LIVECOUNT_WRK", "/usr/bin/wrk");
  } catch {
    return undefined;
  }
}

const lua = (s) => JSON.stringify(s); // a JSON string literal is a valid Lua string literal here (ASCII)

function wrkScript(o) {
  return `
local threads = {}
local next_id = 1
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end
function init(args)
  sent = 0
  ok = 0
  failed = 0
  prefix = ${lua(o.prefix)} .. "-" .. tid .. "-"
  hdrs = { ["Content-Type"] = "application/json", ["Authorization"] = ${lua(`Bearer ${o.key}`)} }
end
function request()
  sent = sent + 1
  hdrs["Idempotency-Key"] = prefix .. sent
  return wrk.format("PUT", ${lua(o.path)}, hdrs, ${lua(o.body)})
end
function response(status, headers, body)
  if status >= 200 and status < 300 then ok = ok + 1 else failed = failed + 1 end
end
function done(summary, latency, requests)
  local sents, oks, fails = {}, 0, 0
  for i, t in ipairs(threads) do
    sents[t:get("tid")] = t:get("sent")
    oks = oks + t:get("ok")
    fails = fails + t:get("failed")
  end
  io.write("HOTPAGE_RESULT {\\"sent\\":[" .. table.concat(sents, ",") .. "],\\"ok\\":" .. oks ..
    ",\\"failed\\":" .. fails .. ",\\"durationUs\\":" .. summary.duration ..
    ",\\"socketErrors\\":" .. (summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout) ..
    ",\\"p50Us\\":" .. latency:percentile(50) .. ",\\"p99Us\\":" .. latency:percentile(99) .. "}\\n")
end
`;
}

async function runWrk(bin, o) {
  const script = join(o.dir, `hotpage-${o.prefix}.lua`);
  writeFileSync(script, wrkScript(o));
  const args = ["-t", String(o.threads), "-c", String(o.connections), "-d", `${o.durationS}s`];
  args.push("--timeout", "10s", "-s", script, o.baseUrl);
  const stdout = await new Promise((resolve, reject) =>
    execFile(bin, args, { maxBuffer: 1 << 20 }, (err, out, errOut) =>
      err ? reject(new Error(`wrk failed: ${err.message} ${errOut}`)) : resolve(out),
    ),
  );
  const line = stdout.split("\n").find((l) => l.startsWith("HOTPAGE_RESULT "));
  if (line === undefined) throw new Error(`wrk printed no result:\n${stdout}`);
  const r = JSON.parse(line.slice("HOTPAGE_RESULT ".length));
  const durationS = r.durationUs / 1e6;
  return {
    driver: "wrk",
    durationS,
    sent: r.sent,
    ok: r.ok,
    failed: r.failed,
    socketErrors: r.socketErrors,
    requestsPerS: Math.round(r.ok / durationS),
    p50Ms: r.p50Us / 1000,
    p99Ms: r.p99Us / 1000,
  };
}

async function runNode(o) {
  const { hostname, port } = new URL(o.baseUrl);
  const agent = new Agent({ keepAlive: true, maxSockets: o.connections });
  const sent = new Array(o.connections).fill(0);
  const latencies = [];
  let ok = 0;
  let failed = 0;
  let firstError;
  const started = performance.now();
  const until = started + o.durationS * 1000;
  const one = (c) =>
    new Promise((resolve) => {
      const t0 = performance.now();
      const headers = {
        "content-type": "application/json",
        authorization: `Bearer ${o.key}`,
        "idempotency-key": `${o.prefix}-${c + 1}-${++sent[c]}`,
      };
      const req = request({ agent, hostname, port, method: "PUT", path: o.path, headers }, (res) => {
        res.resume();
        res.on("end", () => {
          latencies.push(performance.now() - t0);
          if (res.statusCode >= 200 && res.statusCode < 300) ok++;
          else {
            failed++;
            firstError ??= `HTTP ${res.statusCode}`;
          }
          resolve();
        });
      });
      req.on("error", (err) => {
        failed++;
        firstError ??= err.message;
        resolve();
      });
      req.end(o.body);
    });
  await Promise.all(
    sent.map(async (_, c) => {
      while (performance.now() < until) await one(c);
    }),
  );
  const durationS = (performance.now() - started) / 1000;
  agent.destroy();
  const s = summarize(latencies);
  return {
    driver: "node",
    durationS,
    sent,
    ok,
    failed,
    socketErrors: 0,
    requestsPerS: Math.round(ok / durationS),
    p50Ms: s.p50,
    p99Ms: s.p99,
    ...(firstError !== undefined ? { firstError } : {}),
  };
}

/**
 * Runs the load once.
 * @param {object} o {baseUrl, path, key, body, prefix, connections, threads, durationS, dir, driver?}
 *   driver "node" forces the Node client.
 */
export function runLoad(o) {
  const bin = o.driver === "node" ? undefined : wrkBinary();
  return bin !== undefined ? runWrk(bin, o) : runNode(o);
}

/** Every key a load sent, thread by thread. */
export function* keysSent(prefix, sent) {
  for (let t = 0; t < sent.length; t++) for (let i = 1; i <= sent[t]; i++) yield `${prefix}-${t + 1}-${i}`;
}
