/**
 * The floor of the memory benchmark: a bare uWS server with the gateway's socket settings (no
 * compression, the same frame limit, idle timeout and automatic pings, backpressure limit) and
 * nothing of its own per socket but an empty user data object. A `join` or `watch` subscribes the
 * socket to the page's topic and answers with a count frame of the livecount shape, so the viewer
 * driver opens, joins and waits exactly as it does against the gateway. What this process holds per
 * idle socket is what uWS and V8 cost before livecount adds anything.
 *
 *   BENCH_PORT=9001 node loadtest/bench/bare_uws_server.js
 */
import * as uWS from "uWebSockets.js";

const port = Number(process.env.BENCH_PORT ?? 9001);
/** The gateway's settings (apps/gateway/src/gateway_config.ts defaults). */
const WIRE_FRAME_BYTES = 64 * 1024;
const IDLE_TIMEOUT_S = 16;
const MAX_BACKPRESSURE_BYTES = 65_536;

uWS
  .App()
  .ws("/ws", {
    compression: uWS.DISABLED,
    maxPayloadLength: WIRE_FRAME_BYTES,
    idleTimeout: IDLE_TIMEOUT_S,
    sendPingsAutomatically: true,
    maxBackpressure: MAX_BACKPRESSURE_BYTES,
    closeOnBackpressureLimit: true,
    upgrade: (res, req, context) => {
      res.upgrade(
        {},
        req.getHeader("sec-websocket-key"),
        req.getHeader("sec-websocket-protocol"),
        req.getHeader("sec-websocket-extensions"),
        context,
      );
    },
    message: (ws, data) => {
      const frame = JSON.parse(Buffer.from(data).toString());
      if (frame.type !== "join" && frame.type !== "watch") return;
      ws.subscribe(`j:${frame.page}`);
      ws.send(JSON.stringify({ type: "count", page: frame.page, viewers: 1, counters: {}, ts: Date.now() }));
    },
  })
  .any("/*", (res) => {
    res.end("ok");
  })
  .listen("127.0.0.1", port, (token) => {
    if (!token) {
      console.error(`bare uWS server: cannot listen on ${port}`);
      process.exit(1);
    }
  });
