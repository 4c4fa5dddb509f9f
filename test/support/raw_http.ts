/**
 * Raw HTTP/1.1 connections for the tests of the gateway's edge: what a hostile client writes byte by
 * byte (pipelined requests, heads and bodies of an exact size, bodies that never end), and what the
 * gateway answered, as text.
 */
import { connect, type Socket } from "node:net";

export interface RawConnection {
  readonly socket: Socket;
  /** Everything the gateway sent so far, as text. */
  readonly received: () => string;
  /** Resolves when the connection ends, by either side. */
  readonly closed: Promise<void>;
}

/** A keep-alive connection to the loopback `port`, from `localAddress` when given. */
export async function openRaw(port: number, localAddress?: string): Promise<RawConnection> {
  const socket = connect({
    port,
    host: "127.0.0.1",
    ...(localAddress !== undefined ? { localAddress } : {}),
  });
  let text = "";
  socket.on("data", (c: Buffer) => (text += c.toString("latin1")));
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  return { socket, received: () => text, closed };
}

/** Status codes of the responses in `text`, in order. */
export function statuses(text: string): number[] {
  return [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
}

/**
 * Writes `chunk` again and again, as fast as the connection takes it, until `limit` bytes of body
 * are written or the server closes the connection; resolves, once it is closed, with the bytes
 * of body written (each chunk counted as `bodyBytes`: a chunked encoding's framing is not body).
 */
export async function streamUntilClosed(
  conn: RawConnection,
  chunk: string,
  bodyBytes: number,
  limit: number,
): Promise<number> {
  let closed = false;
  void conn.closed.then(() => (closed = true));
  let written = 0;
  while (!closed && written < limit) {
    if (!conn.socket.write(chunk))
      await Promise.race([new Promise((r) => conn.socket.once("drain", r)), conn.closed]);
    written += bodyBytes;
  }
  await conn.closed;
  return written;
}
