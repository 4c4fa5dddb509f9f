/**
 * An incremental parser of `text/event-stream` (WHATWG HTML, "Server-sent events", parsing an
 * event stream): fed decoded text in chunks cut anywhere, it returns the events each chunk
 * completes. Lines end with CRLF, LF or CR; comments are skipped; `retry` is ignored (the client
 * reconnects with its own backoff). No I/O: the reader over fetch feeds it.
 */

/** A dispatched event: its type (`message` when the stream named none), data and last event id. */
export interface SseEvent {
  readonly event: string;
  readonly data: string;
  readonly id: string | undefined;
}

const LINE_END = /\r\n|\r|\n/;

export class SseParser {
  /** The unterminated end of what was pushed. */
  #rest = "";
  /** The last chunk ended with a CR: a LF opening the next one is the rest of that CRLF. */
  #afterCR = false;
  #event = "";
  #data: string[] = [];
  #id: string | undefined;

  push(text: string): SseEvent[] {
    const chunk = this.#afterCR && text.startsWith("\n") ? text.slice(1) : text;
    if (text !== "") this.#afterCR = chunk.endsWith("\r");
    const lines = (this.#rest + chunk).split(LINE_END);
    this.#rest = lines.pop()!;
    const events: SseEvent[] = [];
    for (const line of lines) {
      if (line === "") {
        const event = this.#dispatch();
        if (event !== undefined) events.push(event);
      } else if (!line.startsWith(":")) this.#field(line);
    }
    return events;
  }

  #field(line: string): void {
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") this.#event = value;
    else if (name === "data") this.#data.push(value);
    else if (name === "id" && !value.includes("\0")) this.#id = value;
  }

  /** A blank line: the event gathered so far, if it has data; the id carries over to later events. */
  #dispatch(): SseEvent | undefined {
    const event = this.#event === "" ? "message" : this.#event;
    const data = this.#data;
    this.#event = "";
    this.#data = [];
    return data.length === 0 ? undefined : { event, data: data.join("\n"), id: this.#id };
  }
}
