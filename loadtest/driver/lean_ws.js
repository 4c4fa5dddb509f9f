/**
 * A minimal WebSocket client for load drivers whose clients share the machine with the server under
 * test: a reconnect storm of 18,000 tabs spent more CPU in the `ws` package's handshakes (an HTTP
 * client request, random keys, SHA-1 checks, stream machinery per socket) than the gateway did in
 * serving them, on the same two cores, where a real audience's browsers would use their own.
 *
 * Plain `ws://` only, text frames only, no extensions, no fragmentation (the gateway sends neither):
 * one TCP connection, a fixed handshake, frames parsed in place. The server's pings are answered.
 * Client frames are masked, as the protocol requires, with a fixed all-zero key (the mask protects
 * browsers' intermediaries from crafted payloads; a load driver has nothing to protect).
 */
import { connect } from "node:net";

const KEY = "bGl2ZWNvdW50LXN0b3JtIQ==";
const OP_TEXT = 0x1;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;

/** Calls `on.open()`, `on.message(text)` and, once, `on.close(err?)`. */
export function leanWebSocket(url, localAddress, on) {
  const { hostname, port, pathname } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port), localAddress });
  socket.setNoDelay(true);
  let open = false;
  let closed = false;
  let buffer = Buffer.alloc(0);
  const close = (err) => {
    if (closed) return;
    closed = true;
    socket.destroy();
    on.close(err);
  };
  socket.on("connect", () => {
    socket.write(
      `GET ${pathname} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
  });
  socket.on("data", (chunk) => {
    buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
    if (!open) {
      const end = buffer.indexOf("\r\n\r\n");
      if (end < 0) return;
      const status = buffer.toString("latin1", 0, buffer.indexOf("\r\n"));
      if (!status.startsWith("HTTP/1.1 101"))
        return close(new Error(`unexpected server response: ${status}`));
      open = true;
      buffer = buffer.subarray(end + 4);
      on.open();
    }
    buffer = readFrames(buffer, (op, payload) => {
      if (op === OP_TEXT) on.message(payload.toString("utf8"));
      else if (op === OP_PING) socket.write(frame(OP_PONG, payload));
      else if (op === OP_CLOSE) close();
    });
  });
  socket.on("error", (err) => close(err));
  socket.on("close", () => close());
  return {
    send(text) {
      if (open && !closed) socket.write(frame(OP_TEXT, Buffer.from(text)));
    },
    terminate() {
      close();
    },
  };
}

/** Calls `each(opcode, payload)` for every whole frame in `buf`; returns what is left. */
function readFrames(buf, each) {
  let at = 0;
  for (;;) {
    if (buf.length - at < 2) break;
    const op = buf[at] & 0x0f;
    let len = buf[at + 1] & 0x7f;
    let head = 2;
    if (len === 126) {
      if (buf.length - at < 4) break;
      len = buf.readUInt16BE(at + 2);
      head = 4;
    } else if (len === 127) {
      if (buf.length - at < 10) break;
      len = Number(buf.readBigUInt64BE(at + 2));
      head = 10;
    }
    if (buf.length - at < head + len) break;
    each(op, buf.subarray(at + head, at + head + len));
    at += head + len;
  }
  return at === buf.length ? Buffer.alloc(0) : buf.subarray(at);
}

/** A final, masked (all-zero key) client frame. */
function frame(op, payload) {
  const len = payload.length;
  const head = len < 126 ? 6 : len < 65536 ? 8 : 14;
  const out = Buffer.alloc(head + len);
  out[0] = 0x80 | op;
  if (len < 126) out[1] = 0x80 | len;
  else if (len < 65536) {
    out[1] = 0x80 | 126;
    out.writeUInt16BE(len, 2);
  } else {
    out[1] = 0x80 | 127;
    out.writeBigUInt64BE(BigInt(len), 2);
  }
  // Bytes head-4 .. head-1 are the mask key, left zero: the payload goes as it is.
  payload.copy(out, head);
  return out;
}
