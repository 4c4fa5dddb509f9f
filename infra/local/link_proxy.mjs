#!/usr/bin/env node
// The network link between the local data centers: a TCP proxy in front of each DC's NATS gateway
// port. Every DC advertises its proxy as its gateway address, so all gateway traffic between DCs
// flows through here, and the link can be cut and healed by hand.
//
//   node infra/local/link_proxy.mjs --control 17900 dc1=17322:17222 dc2=27322:27222
//
// listens on 17322 and forwards to 17222 (dc1's gateway port): connections INTO dc1. A small HTTP
// control server on 127.0.0.1:<control> answers:
//   POST /cut            reset every connection through the link; refuse new ones (reset at once)
//   POST /heal           accept connections again (nats-server re-dials within about a second)
//   POST /cut?into=dc1   the same for one direction only: traffic into dc1 (NATS gateway links are
//   POST /heal?into=dc1  one TCP connection per direction, so a link can be half up)
//   GET  /status         {"dc1":{"cut":false,"open":1,"accepted":3},...}
// infra/local/cluster.mjs starts it with `up --dcs 2` and drives it with `cut` and `heal`.
import { createServer as createHttpServer } from "node:http";
import { createConnection, createServer } from "node:net";

const HOST = "127.0.0.1";

function parseArgs(argv) {
  let control;
  const routes = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--control") {
      control = Number(argv[++i]);
      continue;
    }
    const m = /^([A-Za-z0-9_-]+)=(\d+):(\d+)$/.exec(arg);
    if (m === null)
      throw new Error(`bad argument ${JSON.stringify(arg)}: want <dc>=<listen port>:<target port>`);
    routes.push({ dc: m[1], listen: Number(m[2]), target: Number(m[3]) });
  }
  if (!Number.isInteger(control) || routes.length === 0)
    throw new Error("usage: link_proxy.mjs --control <port> <dc>=<listen>:<target> ...");
  return { control, routes };
}

/** One direction of the link: connections into one DC's gateway port. */
class Route {
  #cut = false;
  #pairs = new Set();
  accepted = 0;

  constructor({ dc, listen, target }) {
    this.dc = dc;
    this.listen = listen;
    this.target = target;
    this.server = createServer((client) => this.#accept(client));
  }

  start() {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.listen, HOST, resolve);
    });
  }

  get status() {
    return { cut: this.#cut, open: this.#pairs.size, accepted: this.accepted };
  }

  cut() {
    this.#cut = true;
    for (const [a, b] of this.#pairs) {
      a.resetAndDestroy();
      b.resetAndDestroy();
    }
    this.#pairs.clear();
  }

  heal() {
    this.#cut = false;
  }

  #accept(client) {
    if (this.#cut) {
      client.resetAndDestroy();
      return;
    }
    this.accepted++;
    const upstream = createConnection({ host: HOST, port: this.target });
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const pair = [client, upstream];
    this.#pairs.add(pair);
    const drop = () => {
      this.#pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

const { control, routes: specs } = parseArgs(process.argv.slice(2));
const routes = specs.map((spec) => new Route(spec));
for (const route of routes) await route.start();

const status = () => Object.fromEntries(routes.map((r) => [r.dc, r.status]));
const controlServer = createHttpServer((req, res) => {
  const url = new URL(req.url ?? "/", `http://${HOST}`);
  const into = url.searchParams.get("into");
  const chosen = into === null ? routes : routes.filter((r) => r.dc === into);
  const answer = (code, body) => {
    res.writeHead(code, { "content-type": "application/json" }).end(`${JSON.stringify(body)}\n`);
  };
  if (chosen.length === 0) return answer(404, { error: `no data center ${into}` });
  if (req.method === "POST" && url.pathname === "/cut") {
    for (const r of chosen) r.cut();
    console.log(`${new Date().toISOString()} link cut${into === null ? "" : ` into ${into}`}`);
    return answer(200, status());
  }
  if (req.method === "POST" && url.pathname === "/heal") {
    for (const r of chosen) r.heal();
    console.log(`${new Date().toISOString()} link healed${into === null ? "" : ` into ${into}`}`);
    return answer(200, status());
  }
  if (req.method === "GET" && url.pathname === "/status") return answer(200, status());
  answer(404, { error: "POST /cut, POST /heal (optionally ?into=<dc>), GET /status" });
});
controlServer.listen(control, HOST, () => {
  console.log(
    `link proxy: ${specs.map((s) => `${s.dc} ${s.listen}->${s.target}`).join(", ")}; control ${control}`,
  );
});

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.once(signal, () => {
    for (const r of routes) r.cut();
    process.exit(0);
  });
}
