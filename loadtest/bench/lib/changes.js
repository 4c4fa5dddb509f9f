/**
 * Drives counter changes over HTTP: `PUT /v1/pages/{page}/counter` (likes +1) for every page at a
 * fixed rate, each with its own Idempotency-Key, over keep-alive connections. Used to make count
 * frames flow in the fan-out benchmark, for livecount and for the Socket.IO baseline alike.
 *
 * At most one change per page is in flight: a page whose previous change is not answered yet skips
 * its turn (counted in `skipped`), so a saturated server is offered what it can take instead of an
 * ever-growing queue.
 */
import { Agent, request } from "node:http";
import { prng } from "./prng.js";

/**
 * @param {object} o
 * @param {string} o.baseUrl        http://127.0.0.1:port
 * @param {string[]} o.pages
 * @param {number} o.perPagePerS    changes per page per second
 * @param {string} [o.key]          publisher key (Authorization: Bearer)
 * @param {number} [o.phaseSeed]    each page's phase within the period in a random order drawn from
 *                                  this seed; absent: in page order (page i changes i/n of a period
 *                                  after page 0)
 */
export function startChanges(o) {
  const agent = new Agent({ keepAlive: true, maxSockets: 32 });
  const { hostname, port } = new URL(o.baseUrl);
  const stats = { sent: 0, ok: 0, failed: 0, skipped: 0, firstError: undefined };
  const busy = new Set();
  /** page -> highest value acknowledged */
  const values = new Map();
  let inFlight = 0;
  let seq = 0;
  const body = JSON.stringify({ action: "increment", counter: "likes", by: 1 });

  const put = (page) =>
    new Promise((resolve) => {
      if (busy.has(page)) {
        stats.skipped++;
        resolve();
        return;
      }
      busy.add(page);
      stats.sent++;
      inFlight++;
      const headers = {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
        "idempotency-key": `bench-${process.pid}-${seq++}`,
      };
      if (o.key !== undefined) headers.authorization = `Bearer ${o.key}`;
      const req = request(
        {
          agent,
          hostname,
          port,
          method: "PUT",
          path: `/v1/pages/${encodeURIComponent(page)}/counter`,
          headers,
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (c) => (text += c));
          res.on("end", () => {
            inFlight--;
            busy.delete(page);
            if (res.statusCode === 200) {
              stats.ok++;
              const { value } = JSON.parse(text);
              values.set(page, Math.max(values.get(page) ?? 0, value));
            } else {
              stats.failed++;
              stats.firstError ??= `${res.statusCode} ${text}`;
            }
            resolve();
          });
        },
      );
      req.on("error", (err) => {
        inFlight--;
        busy.delete(page);
        stats.failed++;
        stats.firstError ??= String(err.message);
        resolve();
      });
      req.end(body);
    });

  const intervalMs = 1000 / o.perPagePerS;
  const slots = o.pages.map((_, i) => i);
  if (o.phaseSeed !== undefined) {
    const random = prng(o.phaseSeed);
    for (let i = slots.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [slots[i], slots[j]] = [slots[j], slots[i]];
    }
  }
  // Pages are spread over the interval, so changes arrive evenly rather than in bursts.
  const timers = o.pages.map((page, i) =>
    setTimeout(
      () => {
        timers[i] = setInterval(() => void put(page), intervalMs);
      },
      (intervalMs * slots[i]) / o.pages.length,
    ),
  );

  return {
    stats,
    values,
    /** Stops sending and waits for the answers still in flight. */
    async stop() {
      for (const t of timers) {
        clearTimeout(t);
        clearInterval(t);
      }
      while (inFlight > 0) await new Promise((r) => setTimeout(r, 10));
      agent.destroy();
    },
  };
}
