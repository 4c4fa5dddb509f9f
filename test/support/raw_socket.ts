/**
 * A WebSocket client written by hand over a plain TCP socket, for faults a well-behaved library
 * will not produce: it does the HTTP upgrade, sends masked frames, and then stays silent: it never
 * answers a ping, never sends a close frame. It keeps reading, so the test sees when the server
 * gives up on it.
 */
import { createHash, randomBytes } from "node:crypto";
import { connect, type Socket } from "node:net";

const WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const OPCODE_TEXT = 0x1;
const FIN = 0x80;
const MASKED = 0x80;
/** Payloads up to this length fit the 7-bit length field. */
const SHORT_PAYLOAD_MAX = 125;
const EXTENDED_16 = 126;

export class SilentSocket {
  /** Resolves when the server closes the TCP connection (or it fails). */
  readonly ended: Promise<number>;
  #received = 0;

  private constructor(readonly socket: Socket) {
    this.ended = new Promise((resolve) => socket.once("close", () => resolve(Date.now())));
    socket.on("error", () => {});
  }

  /** Opens a TCP connection to `host:port`, upgrades `path` to a WebSocket and resolves once it is upgraded. */
  static async open(host: string, port: number, path = "/ws"): Promise<SilentSocket> {
    const socket = connect({ host, port });
    const client = new SilentSocket(socket);
    const key = randomBytes(16).toString("base64");
    const accept = createHash("sha1")
      .update(key + WS_GUID)
      .digest("base64");
    await new Promise<void>((resolve, reject) => {
      let head = "";
      const onData = (chunk: Buffer): void => {
        head += chunk.toString("latin1");
        const end = head.indexOf("\r\n\r\n");
        if (end < 0) return;
        socket.off("data", onData);
        const response = head.slice(0, end);
        if (
          !response.startsWith("HTTP/1.1 101") ||
          !response.toLowerCase().includes(`sec-websocket-accept: ${accept.toLowerCase()}`)
        ) {
          reject(new Error(`upgrade refused: ${response.split("\r\n")[0]}`));
          return;
        }
        // Anything the server sends from now on (count frames, pings) is read and ignored.
        socket.on("data", (data: Buffer) => (client.#received += data.length));
        resolve();
      };
      socket.on("data", onData);
      socket.once("error", reject);
      socket.once("connect", () => {
        socket.write(
          [
            `GET ${path} HTTP/1.1`,
            `Host: ${host}:${port}`,
            "Upgrade: websocket",
            "Connection: Upgrade",
            `Sec-WebSocket-Key: ${key}`,
            "Sec-WebSocket-Version: 13",
            "",
            "",
          ].join("\r\n"),
        );
      });
    });
    return client;
  }

  /** Bytes received since the upgrade (frames and pings the server sent). */
  get received(): number {
    return this.#received;
  }

  /** Sends one masked text frame. */
  sendText(text: string): void {
    const payload = Buffer.from(text, "utf8");
    const mask = randomBytes(4);
    let header: Buffer;
    if (payload.length <= SHORT_PAYLOAD_MAX) {
      header = Buffer.from([FIN | OPCODE_TEXT, MASKED | payload.length]);
    } else {
      header = Buffer.alloc(4);
      header[0] = FIN | OPCODE_TEXT;
      header[1] = MASKED | EXTENDED_16;
      header.writeUInt16BE(payload.length, 2);
    }
    const masked = Buffer.alloc(payload.length);
    for (let i = 0; i < payload.length; i++) masked[i] = payload[i]! ^ mask[i % 4]!;
    this.socket.write(Buffer.concat([header, mask, masked]));
  }

  destroy(): void {
    this.socket.destroy();
  }
}
