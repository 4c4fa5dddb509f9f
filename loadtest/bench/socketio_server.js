/**
 * The baseline of the fan-out benchmark: a Socket.IO server doing the gateway's job the usual way.
 * One room per page; a client `watch`es (or `join`s) a page and gets the current count at once;
 * each change (an HTTP PUT, the same request the livecount gateway gets) increments the page's
 * counter and broadcasts one count frame of the livecount shape to the page's room.
 *
 *   PORT=3000 node loadtest/bench/socketio_server.js
 *
 * websocket transport only, no per-message deflate, no polling: the fastest Socket.IO setup.
 */
import { createServer } from "node:http";
import { Server } from "socket.io";

const port = Number(process.env.PORT ?? 3000);
const pages = new Map();

function state(page) {
  let s = pages.get(page);
  if (s === undefined) pages.set(page, (s = { viewers: 0, likes: 0 }));
  return s;
}

const frameOf = (page, s) => ({
  type: "count",
  page,
  viewers: s.viewers,
  counters: { likes: s.likes },
  ts: Date.now(),
});

const PAGE_COUNTER = /^\/v1\/pages\/([^/]+)\/counter$/;

const http = createServer((req, res) => {
  const m = PAGE_COUNTER.exec(req.url ?? "");
  if (req.method === "GET" && req.url === "/healthz") {
    res.writeHead(200, { "content-type": "application/json" }).end('{"status":"ok"}');
    return;
  }
  if (m === null || req.method !== "PUT") {
    res.writeHead(404).end();
    return;
  }
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    const page = decodeURIComponent(m[1]);
    const { action, by = 1 } = JSON.parse(body);
    const s = state(page);
    s.likes += action === "decrement" ? -by : by;
    io.to(page).emit("count", frameOf(page, s));
    res
      .writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ page, counter: "likes", value: s.likes, updated_at: Date.now() }));
  });
});

const io = new Server(http, { transports: ["websocket"], perMessageDeflate: false, serveClient: false });
io.on("connection", (socket) => {
  /** page -> whether this socket counts as a viewer there */
  const joined = new Map();
  const enter = (page, counts) => {
    if (typeof page !== "string" || joined.has(page)) return;
    joined.set(page, counts);
    socket.join(page);
    const s = state(page);
    if (counts) {
      s.viewers++;
      io.to(page).emit("count", frameOf(page, s));
    } else socket.emit("count", frameOf(page, s));
  };
  const exit = (page) => {
    if (!joined.has(page)) return;
    const counted = joined.get(page);
    joined.delete(page);
    socket.leave(page);
    if (counted) {
      const s = state(page);
      s.viewers--;
      io.to(page).emit("count", frameOf(page, s));
    }
  };
  socket.on("watch", (page) => enter(page, false));
  socket.on("join", (page) => enter(page, true));
  socket.on("unwatch", exit);
  socket.on("leave", exit);
  socket.on("disconnect", () => {
    for (const page of [...joined.keys()]) exit(page);
  });
});

http.listen(port, "127.0.0.1", () => process.send?.({ type: "listening", port }));
process.on("disconnect", () => process.exit(0));
