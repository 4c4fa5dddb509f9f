// k6 load script: widget viewers over WebSocket protocol v1 (stock k6 >= 0.47, module k6/ws).
//
// Each iteration is one visit: a VU opens a socket, joins a random page with its own viewer id,
// stays, leaves and closes, then thinks for a moment before the next visit. A share of visits
// (HIDDEN_SHARE) starts in a background tab and comes to the front halfway through the stay; the
// others go to the background then (`active` frames), as tabs do.
//
//   k6 run -e WS_URL=ws://127.0.0.1:8080/ws -e PAGES=100 -e VUS=500 loadtest/k6/viewers.js
//
// Environment: WS_URL (default ws://127.0.0.1:8080/ws), PAGES (100), PAGE_PREFIX (k6-page-),
// VUS (200), RAMP (30s), HOLD (1m), STAY_S (20: seconds a visit lasts), VISIBLE_TIMEOUT_MS (5000),
// HIDDEN_SHARE (0.3: visits that start in a background tab), COUNTS (0; 1: offer the
// `livecount.counts` subprotocol and read `counts` frames, each page of one checked like a count frame).
//
// Checks: the handshake is a 101; a count frame arrives after the join, for the joined page; the
// count comes to include this viewer (viewers >= 1) within VISIBLE_TIMEOUT_MS; frames are well
// formed (with `active` <= `viewers` and `connections`); no error frame. Trends: join -> first count frame, join -> count including this viewer.
import { check, sleep } from "k6";
import { Counter, Rate, Trend } from "k6/metrics";
import ws from "k6/ws";

const WS_URL = __ENV.WS_URL || "ws://127.0.0.1:8080/ws";
const PAGES = parseInt(__ENV.PAGES || "100", 10);
const PAGE_PREFIX = __ENV.PAGE_PREFIX || "k6-page-";
const VUS = parseInt(__ENV.VUS || "200", 10);
const RAMP = __ENV.RAMP || "30s";
const HOLD = __ENV.HOLD || "1m";
const STAY_MS = parseInt(__ENV.STAY_S || "20", 10) * 1000;
const VISIBLE_TIMEOUT_MS = parseInt(__ENV.VISIBLE_TIMEOUT_MS || "5000", 10);
const HIDDEN_SHARE = parseFloat(__ENV.HIDDEN_SHARE || "0.3");
const COUNTS = __ENV.COUNTS === "1";
const CONNECT_PARAMS = COUNTS
  ? { tags: { name: "viewer" }, headers: { "Sec-WebSocket-Protocol": "livecount.counts" } }
  : { tags: { name: "viewer" } };

/** join sent -> first count frame of the page (the value the gateway had then). */
const joinToFirstCount = new Trend("join_to_first_count", true);
/** join sent -> first count frame whose viewers include this viewer (viewers >= 1). */
const joinToCounted = new Trend("join_to_counted", true);
const firstCountReceived = new Rate("first_count_received");
const countFrames = new Counter("count_frames");
const errorFrames = new Counter("error_frames");

export const options = {
  scenarios: {
    viewers: {
      executor: "ramping-vus",
      startVUs: 0,
      stages: [
        { duration: RAMP, target: VUS },
        { duration: HOLD, target: VUS },
        { duration: RAMP, target: 0 },
      ],
      // A visit in progress may finish its stay before the VU stops.
      gracefulRampDown: `${Math.ceil(STAY_MS / 1000) + 10}s`,
    },
  },
  thresholds: {
    checks: ["rate>0.99"],
    first_count_received: ["rate>0.99"],
    join_to_first_count: ["p(95)<250", "p(99)<500"],
    join_to_counted: ["p(95)<500", "p(99)<1000"],
    ws_connecting: ["p(95)<500"],
    error_frames: ["count<1"],
  },
};

function isCountFrame(f) {
  return (
    f.type === "count" &&
    typeof f.page === "string" &&
    Number.isInteger(f.viewers) &&
    f.viewers >= 0 &&
    Number.isInteger(f.active) &&
    f.active >= 0 &&
    f.active <= f.viewers &&
    Number.isInteger(f.connections) &&
    f.connections >= 0 &&
    typeof f.counters === "object" &&
    f.counters !== null &&
    typeof f.ts === "number"
  );
}

export default function () {
  const page = `${PAGE_PREFIX}${Math.floor(Math.random() * PAGES)}`;
  const viewer = `k6-vu-${__VU}`;
  let joinedAt = 0;
  let firstSeen = false;
  let counted = false;

  /** A page's value: a count frame, or one page of a counts frame made into one. */
  function onCount(frame) {
    countFrames.add(1);
    check(frame, {
      "count frame is well formed": isCountFrame,
      "count frame is for the joined page": (f) => f.page === page,
    });
    const now = Date.now();
    if (!firstSeen) {
      firstSeen = true;
      firstCountReceived.add(true);
      joinToFirstCount.add(now - joinedAt);
    }
    if (!counted && frame.page === page && frame.viewers >= 1) {
      counted = true;
      joinToCounted.add(now - joinedAt);
    }
  }

  const res = ws.connect(WS_URL, CONNECT_PARAMS, function (socket) {
    socket.on("open", function () {
      joinedAt = Date.now();
      const hidden = Math.random() < HIDDEN_SHARE;
      socket.send(JSON.stringify({ type: "join", page, viewer, active: !hidden }));
      // Halfway through the visit the tab changes sides: to the front, or to the background.
      socket.setTimeout(function () {
        socket.send(JSON.stringify({ type: "active", page, active: hidden }));
      }, STAY_MS / 2);

      socket.setTimeout(function () {
        check(counted, { "count includes this viewer (viewers >= 1) in time": (c) => c === true });
      }, VISIBLE_TIMEOUT_MS);

      socket.setTimeout(function () {
        socket.send(JSON.stringify({ type: "leave", page }));
        socket.close();
      }, STAY_MS);
    });

    socket.on("message", function (data) {
      let frame;
      try {
        frame = JSON.parse(data);
      } catch (err) {
        check(err, { "frame is JSON": () => false });
        return;
      }
      if (frame.type === "error") {
        errorFrames.add(1);
        check(frame, { "no error frame": () => false });
        return;
      }
      if (frame.type === "count") onCount(frame);
      else if (frame.type === "counts" && typeof frame.pages === "object" && frame.pages !== null) {
        for (const p of Object.keys(frame.pages))
          onCount(Object.assign({}, frame.pages[p], { type: "count", page: p, ts: frame.ts }));
      }
    });

    socket.on("error", function (e) {
      check(e, { "no socket error": () => false });
    });
  });

  check(res, { "handshake status is 101": (r) => r && r.status === 101 });
  if (!firstSeen) firstCountReceived.add(false);
  sleep(1 + Math.random() * 2);
}
