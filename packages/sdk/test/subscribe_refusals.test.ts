/**
 * Live values when the gateway refuses some of a socket's frames, against a real embedded gateway
 * with small budgets: past the socket's frame budget (an error naming no page, so which joins and
 * leaves went through is unknown) and past the pages one socket may hold. Either way every page
 * subscribed ends counted, and every page let go ends not.
 */
import { describe, expect, test } from "vitest";
import type { LivecountError } from "../src/index.js";
import { eventually } from "../../../test/support/eventually.js";
import { uniquePage, useGateway } from "./support.js";

/** LIVECOUNT_SOCKET_BURST here: frames a socket may send at once. */
const FRAME_BURST = 20;
/** LIVECOUNT_MAX_PAGES_PER_SOCKET here. */
const PAGES_PER_SOCKET = 12;

describe("sdk - subscribe, refused frames", () => {
  const fx = useGateway(
    { reconnect: { baseMs: 20, maxMs: 200 } },
    {
      LIVECOUNT_SOCKET_BURST: String(FRAME_BURST),
      LIVECOUNT_SOCKET_RATE: "1",
      LIVECOUNT_MAX_PAGES_PER_SOCKET: String(PAGES_PER_SOCKET),
    },
  );

  test("sdk - frames past the socket's budget: a new socket subscribes every page again, pages let go count nobody", async () => {
    const { client: c, errors } = fx.client(fx.platform.url);
    const before = Array.from({ length: 10 }, (_, i) => uniquePage(`budget-a${i}`));
    const after = Array.from({ length: 10 }, (_, i) => uniquePage(`budget-b${i}`));
    // Held throughout, so the socket stays (a client with no subscription left closes it).
    const home = uniquePage("budget-home");
    c.subscribe(home, () => {}, { mode: "join", viewer: "sdk-budget" });
    const offs = before.map((page) => c.subscribe(page, () => {}, { mode: "join", viewer: "sdk-budget" }));
    for (const page of before) await fx.platform.waitForViewers(page, 1, 10_000);
    // 10 leaves and 10 joins at once, on a budget of 20 that the first joins spent most of.
    for (const off of offs) off();
    for (const page of after) c.subscribe(page, () => {}, { mode: "join", viewer: "sdk-budget" });
    await eventually(() => expect(errors.map((e) => e.code)).toContain("rate_limited"));
    for (const page of after) await fx.platform.waitForViewers(page, 1, 10_000);
    for (const page of before) await fx.platform.waitForViewers(page, 0, 10_000);
    await fx.platform.waitForViewers(home, 1, 10_000);
    expect(c.connects).toBe(2);
  });

  test("sdk - pages refused for want of room on the socket are subscribed once another page lets go", async () => {
    const { client: c } = fx.client(fx.platform.url);
    const pages = Array.from({ length: PAGES_PER_SOCKET + 2 }, (_, i) => uniquePage(`room-${i}`));
    const refused: LivecountError[] = [];
    const offs = pages.map((page) =>
      c.subscribe(page, () => {}, { mode: "join", viewer: "sdk-room", onError: (e) => refused.push(e) }),
    );
    await eventually(() => expect(refused.map((e) => e.code)).toEqual(["too_many_pages", "too_many_pages"]));
    const waiting = refused.map((e) => e.page!);
    expect(waiting).toEqual(pages.slice(PAGES_PER_SOCKET));
    for (const page of waiting) expect((await fx.platform.counter(page)).viewers).toBe(0);
    offs[0]!();
    offs[1]!();
    for (const page of waiting) await fx.platform.waitForViewers(page, 1, 10_000);
    for (const page of pages.slice(0, 2)) await fx.platform.waitForViewers(page, 0, 10_000);
    expect(c.connects).toBe(1);
  });
});
