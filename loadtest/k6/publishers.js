// k6 load script: publishers adding likes over the HTTP API (stock k6 >= 0.47, module k6/http).
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e PUBLISHER_KEY=change-me-please -e PAGES=100 \
//     loadtest/k6/publishers.js
//
// Environment: BASE_URL (default http://127.0.0.1:8080), PUBLISHER_KEY (required), PAGES (100),
// PAGE_PREFIX (k6-page-), VUS (20), DURATION (1m), RETRIES (3), REPLAY_RATE (0.1: share of
// increments deliberately sent twice with the same key), THINK_S (0.1), READ_RATE (0.05: share of
// increments followed by a read of the page's last minute and of its stats).
//
// Every increment carries its own Idempotency-Key; a failed attempt (network error, 5xx, 429) is
// retried with the same key, which must never count twice. Checks: 200; the value a VU sees for a
// page only grows (its own later increment includes its earlier one); a replay with the same key
// answers the original value and says Idempotent-Replayed: true; the last minute's window of a page
// includes the increment just answered (this script only increments); stats are well formed.
import { check, fail, sleep } from "k6";
import http from "k6/http";
import { Counter } from "k6/metrics";

const BASE_URL = __ENV.BASE_URL || "http://127.0.0.1:8080";
const PUBLISHER_KEY = __ENV.PUBLISHER_KEY || "";
const PAGES = parseInt(__ENV.PAGES || "100", 10);
const PAGE_PREFIX = __ENV.PAGE_PREFIX || "k6-page-";
const VUS = parseInt(__ENV.VUS || "20", 10);
const DURATION = __ENV.DURATION || "1m";
const RETRIES = parseInt(__ENV.RETRIES || "3", 10);
const REPLAY_RATE = parseFloat(__ENV.REPLAY_RATE || "0.1");
const THINK_S = parseFloat(__ENV.THINK_S || "0.1");
const READ_RATE = parseFloat(__ENV.READ_RATE || "0.05");

const retries = new Counter("increment_retries");

export const options = {
  scenarios: {
    publishers: { executor: "constant-vus", vus: VUS, duration: DURATION },
  },
  thresholds: {
    checks: ["rate>0.99"],
    http_req_failed: ["rate<0.01"],
    "http_req_duration{name:PUT /v1/pages/{page}/counter}": ["p(95)<250", "p(99)<500"],
  },
};

export function setup() {
  if (PUBLISHER_KEY === "") fail("set PUBLISHER_KEY (one of the gateway's LIVECOUNT_PUBLISHER_KEYS)");
}

const BODY = JSON.stringify({ action: "increment", counter: "likes", by: 1 });
/** Per VU: page -> last value this VU was answered. */
const lastValue = {};

function retryable(res) {
  return res.status === 0 || res.status === 429 || res.status >= 500;
}

function put(page, key, tag) {
  const url = `${BASE_URL}/v1/pages/${encodeURIComponent(page)}/counter`;
  const params = {
    headers: {
      Authorization: `Bearer ${PUBLISHER_KEY}`,
      "Content-Type": "application/json",
      "Idempotency-Key": key,
    },
    tags: { name: "PUT /v1/pages/{page}/counter", kind: tag },
  };
  let res = http.put(url, BODY, params);
  for (let attempt = 1; attempt <= RETRIES && retryable(res); attempt++) {
    retries.add(1);
    sleep(0.1 * Math.pow(2, attempt - 1));
    res = http.put(url, BODY, params);
  }
  return res;
}

export default function () {
  const page = `${PAGE_PREFIX}${Math.floor(Math.random() * PAGES)}`;
  const key = `k6-${__VU}-${__ITER}-${Date.now()}`;
  const res = put(page, key, "first");
  if (!check(res, { "increment status is 200": (r) => r.status === 200 })) return;
  const value = res.json("value");
  const previous = lastValue[page];
  check(value, {
    "likes only grow for this VU and page": (v) =>
      Number.isInteger(v) && (previous === undefined || v > previous),
  });
  lastValue[page] = value;

  if (Math.random() < READ_RATE) {
    const path = `${BASE_URL}/v1/pages/${encodeURIComponent(page)}`;
    const headers = { Authorization: `Bearer ${PUBLISHER_KEY}` };
    const window = http.get(`${path}/counters/likes/window?seconds=60`, {
      headers,
      tags: { name: "GET /v1/pages/{page}/counters/{counter}/window" },
    });
    check(window, {
      "window status is 200": (r) => r.status === 200,
      "the last minute includes this increment": (r) => r.status === 200 && r.json("value") >= 1,
    });
    const stats = http.get(`${path}/stats`, { headers, tags: { name: "GET /v1/pages/{page}/stats" } });
    check(stats, {
      "stats status is 200": (r) => r.status === 200,
      "stats are well formed": (r) =>
        r.status === 200 &&
        Number.isInteger(r.json("viewers")) &&
        Number.isInteger(r.json("peak_viewers.1h")) &&
        Number.isInteger(r.json("unique_visitors.24h")),
    });
  }

  if (Math.random() < REPLAY_RATE) {
    const again = put(page, key, "replay");
    check(again, {
      "replay status is 200": (r) => r.status === 200,
      "replay answers the original value": (r) => r.status === 200 && r.json("value") === value,
      "replay says Idempotent-Replayed": (r) => r.headers["Idempotent-Replayed"] === "true",
    });
  }
  sleep(THINK_S);
}
