import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TestPlatform } from "../../../test/support/platform.js";

describe("gateway - protocol v1 over a real socket", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start();
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("gateway - a join counts the socket and both the joiner and another socket's watcher see viewers 1", async () => {
    const page = "proto-join";
    const watcher = await platform.watcher(page);
    expect(watcher.lastCount(page)).toMatchObject({ type: "count", page, viewers: 0, counters: {} });

    const joiner = await platform.connect();
    joiner.join(page, "viewer-1");
    const seen = await joiner.waitForViewers(page, 1);
    await watcher.waitForViewers(page, 1);
    expect(seen).toMatchObject({ type: "count", page, viewers: 1, counters: {} });
    expect(seen.ts).toBeGreaterThan(Date.now() - 60_000);
    await platform.waitForViewers(page, 1);

    joiner.leave(page);
    await watcher.waitForViewers(page, 0);
    // The watcher never saw anything but 0, then 1, then 0: no double count on the way.
    expect(dedupe(watcher.viewerHistory(page))).toEqual([0, 1, 0]);
    await platform.waitForViewers(page, 0);
  });

  test("gateway - a watch does not count as a viewer", async () => {
    const page = "proto-watch";
    const watchers = await Promise.all([
      platform.watcher(page),
      platform.watcher(page),
      platform.watcher(page),
    ]);
    const joiner = await platform.connect();
    joiner.join(page);
    await joiner.waitForViewers(page, 1);
    for (const w of watchers) await w.waitForViewers(page, 1);
    // Three watchers and one joiner: every frame anyone saw says 0 or 1, never more.
    for (const c of [...watchers, joiner])
      expect(c.viewerHistory(page).every((v) => v === 0 || v === 1)).toBe(true);
    expect((await platform.counter(page)).viewers).toBe(1);
  });

  test("gateway - unwatch stops count frames for the page", async () => {
    const page = "proto-unwatch";
    const leaving = await platform.watcher(page);
    const staying = await platform.watcher(page);
    leaving.unwatch(page);
    // Frames are handled in order: the pong proves the unwatch was handled.
    await leaving.ping();
    const before = leaving.counts(page).length;

    const joiner = await platform.connect();
    joiner.join(page);
    await staying.waitForViewers(page, 1);
    // Anything published to the unwatched socket would precede this pong on the same connection.
    await leaving.ping();
    expect(leaving.counts(page)).toHaveLength(before);
  });

  test("gateway - unwatch stops count frames for a binary socket too, and a watch after it brings them back", async () => {
    const page = "proto-unwatch-msgpack";
    const leaving = await platform.connect({ encoding: "msgpack" });
    leaving.watch(page);
    await leaving.waitForViewers(page, 0);
    const staying = await platform.watcher(page);
    leaving.unwatch(page);
    await leaving.ping();
    const before = leaving.counts(page).length;

    const joiner = await platform.connect();
    joiner.join(page);
    await staying.waitForViewers(page, 1);
    await leaving.ping();
    expect(leaving.counts(page)).toHaveLength(before);

    // Watching again as JSON: the frames come again, as text now.
    leaving.sendRaw(JSON.stringify({ type: "watch", page }));
    await leaving.waitForViewers(page, 1);
    joiner.leave(page);
    await leaving.waitForViewers(page, 0);
    const binary = leaving.received.filter((r) => r.frame.type === "count").map((r) => r.binary);
    // Binary frames until the unwatch, none while unwatched, text frames after the JSON watch.
    expect(binary.slice(0, before).every((b) => b)).toBe(true);
    expect(binary.length).toBeGreaterThanOrEqual(before + 2);
    expect(binary.slice(before).some((b) => b)).toBe(false);
  });

  test("gateway - a ping is answered by a pong", async () => {
    const client = await platform.connect();
    client.send({ type: "ping" });
    const pong = await client.next((f) => f.type === "pong");
    expect(pong).toEqual({ type: "pong" });
    expect(client.received.find((r) => r.frame.type === "pong")?.binary).toBe(false);
  });

  test("gateway - binary msgpack frames work the same and a binary socket is answered in msgpack", async () => {
    const page = "proto-msgpack";
    const jsonWatcher = await platform.watcher(page);
    const binary = await platform.connect({ encoding: "msgpack" });
    binary.join(page, "binary-viewer");
    const seen = await binary.waitForViewers(page, 1);
    expect(seen).toMatchObject({ type: "count", page, viewers: 1, counters: {} });
    await jsonWatcher.waitForViewers(page, 1);

    await binary.ping();
    binary.send({ type: "join", page: "" });
    const error = await binary.nextError();
    expect(error).toMatchObject({ type: "error", code: "invalid_page" });
    // Every frame the binary socket got came as a binary message; the JSON watcher's as text.
    expect(binary.received.length).toBeGreaterThanOrEqual(3);
    expect(binary.received.every((r) => r.binary)).toBe(true);
    expect(jsonWatcher.received.every((r) => !r.binary)).toBe(true);

    binary.send({ type: "leave", page });
    await jsonWatcher.waitForViewers(page, 0);
  });
});

/** Collapses runs of equal values: the distinct values in the order they were seen. */
function dedupe(values: readonly number[]): number[] {
  return values.filter((v, i) => i === 0 || values[i - 1] !== v);
}
