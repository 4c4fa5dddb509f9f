/**
 * The SDK's text/event-stream parser: the same events however the bytes are cut into chunks, with
 * any of the three line endings, comments skipped, data lines joined, the last id carried over.
 */
import { describe, expect, test } from "vitest";
import { SseParser, type SseEvent } from "../src/sse_parser.js";

const STREAM = [
  ": open",
  "",
  "event: count",
  "id: 17",
  'data: {"type":"count","viewers":1}',
  "",
  ": ping",
  "",
  "data: first line",
  "data:second line",
  "",
  "event: count",
  "data",
  "",
  "id",
  "event: nothing",
  "",
  "retry: 10",
  "event: count",
  "data: last",
  "",
  "",
].join("\n");

const EXPECTED: SseEvent[] = [
  { event: "count", id: "17", data: '{"type":"count","viewers":1}' },
  { event: "message", id: "17", data: "first line\nsecond line" },
  { event: "count", id: "17", data: "" },
  { event: "count", id: "", data: "last" },
];

function parseIn(text: string, cuts: readonly number[]): SseEvent[] {
  const parser = new SseParser();
  const events: SseEvent[] = [];
  let from = 0;
  for (const cut of [...cuts, text.length]) {
    events.push(...parser.push(text.slice(from, cut)));
    from = cut;
  }
  return events;
}

describe("sdk - event stream parser", () => {
  test("sse - events, comments, multi-line data and ids come out the same for LF, CRLF and CR line ends", () => {
    for (const ending of ["\n", "\r\n", "\r"]) {
      const text = STREAM.replaceAll("\n", ending);
      expect(parseIn(text, []), JSON.stringify(ending)).toEqual(EXPECTED);
    }
  });

  test("sse - however the stream is cut in two or three chunks, the events are the same", () => {
    for (const ending of ["\n", "\r\n", "\r"]) {
      const text = STREAM.replaceAll("\n", ending);
      for (let a = 0; a <= text.length; a++) {
        expect(parseIn(text, [a]), `${JSON.stringify(ending)} cut at ${a}`).toEqual(EXPECTED);
        for (let b = a; b <= text.length; b += 7) expect(parseIn(text, [a, b])).toEqual(EXPECTED);
      }
    }
  });

  test("sse - an event waits for its blank line; a CRLF cut in two ends one line, not two", () => {
    const parser = new SseParser();
    expect(parser.push("event: count\ndata: 1\r")).toEqual([]);
    expect(parser.push("\ndata: 2\r")).toEqual([]);
    expect(parser.push("\n\r")).toEqual([{ event: "count", id: undefined, data: "1\n2" }]);
    expect(parser.push("\n")).toEqual([]);
    expect(parser.push("data: 3\n")).toEqual([]);
  });
});
