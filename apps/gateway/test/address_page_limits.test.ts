/**
 * What one client address can make the platform remember by joining and watching pages: at most
 * LIVECOUNT_MAX_PAGES_PER_IP pages at once over all its sockets, and at most
 * LIVECOUNT_NEW_PAGE_RATE pages per second that no socket on the gateway has yet (each may end up
 * stored until it has been empty for LIVECOUNT_EMPTY_PAGE_TTL_S). Real sockets from several loopback
 * source addresses (127.0.0.x), so one address at its limit shows another is not affected.
 */
import { afterEach, describe, expect, test } from "vitest";
import { sleep } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";
import type { TestClient } from "../../../test/support/ws_client.js";

const HOSTILE = "127.0.0.2";
const NEIGHBOUR = "127.0.0.3";

/** Sends `frames` joins (or watches) of `pages` on `client` and waits until they are all answered. */
async function joinAll(client: TestClient, pages: readonly string[], watch = false): Promise<void> {
  for (const page of pages) {
    if (watch) client.watch(page);
    else client.join(page, `v-${page}`);
  }
  await client.ping();
}

/** The pages `client` got `code` errors for. */
function refusedPages(client: TestClient, code: string): string[] {
  return client
    .errors()
    .filter((e) => e.code === code)
    .map((e) => e.page ?? "");
}

describe("gateway - pages per client address", () => {
  let platform: TestPlatform | undefined;

  afterEach(async () => {
    await platform?.close();
    platform = undefined;
  });

  test("LIVECOUNT_MAX_PAGES_PER_IP - an address holds at most that many pages over all its sockets; leaving or closing makes room; another address is not affected", async () => {
    const max = 12;
    platform = await TestPlatform.start({
      LIVECOUNT_MAX_PAGES_PER_IP: String(max),
      LIVECOUNT_NEW_PAGE_BURST: "1000",
    });
    const a = await platform.connect({ localAddress: HOSTILE });
    const b = await platform.connect({ localAddress: HOSTILE });
    const pages = Array.from({ length: max + 3 }, (_, i) => `cap-${i}`);
    // Half joined on one socket, half watched on the other: both count against the address.
    await joinAll(a, pages.slice(0, max / 2));
    await joinAll(b, pages.slice(max / 2, max), true);
    expect(a.errors()).toEqual([]);
    expect(b.errors()).toEqual([]);
    // At the limit: the next pages are refused, on either socket, and counted nowhere.
    await joinAll(a, pages.slice(max, max + 2));
    await joinAll(b, pages.slice(max + 2), true);
    expect(refusedPages(a, "too_many_pages")).toEqual(pages.slice(max, max + 2));
    expect(refusedPages(b, "too_many_pages")).toEqual(pages.slice(max + 2));
    expect(a.errors()[0]!.message).toContain(`at most ${max} pages per client address`);
    for (const page of pages.slice(max)) expect((await platform.counter(page)).viewers).toBe(0);

    // Another address joins as usual.
    const neighbour = await platform.connect({ localAddress: NEIGHBOUR });
    neighbour.join("cap-neighbour", "n");
    await neighbour.waitForViewers("cap-neighbour", 1);
    expect(neighbour.errors()).toEqual([]);

    // A leave makes room for exactly one more page.
    a.leave(pages[0]!);
    await joinAll(a, [pages[max]!, pages[max + 1]!]);
    expect(refusedPages(a, "too_many_pages")).toEqual([...pages.slice(max, max + 2), pages[max + 1]]);
    await a.waitForViewers(pages[max]!, 1);

    // Closing a socket returns all its pages to the address.
    await b.close();
    const c = await platform.connect({ localAddress: HOSTILE });
    await joinAll(c, pages.slice(max + 1, max + 3));
    expect(c.errors()).toEqual([]);
    await c.waitForViewers(pages[max + 2]!, 1);
  });

  test("LIVECOUNT_NEW_PAGE_RATE / _BURST - an address takes on at most the burst of pages new to the gateway, then the rate; joins of pages someone here has are free", async () => {
    const ratePerS = 5;
    const burst = 10;
    platform = await TestPlatform.start({
      LIVECOUNT_NEW_PAGE_RATE: String(ratePerS),
      LIVECOUNT_NEW_PAGE_BURST: String(burst),
    });
    const neighbour = await platform.connect({ localAddress: NEIGHBOUR });
    neighbour.join("rate-popular", "n");
    await neighbour.waitForViewers("rate-popular", 1);

    const hostile = await Promise.all(
      Array.from({ length: 3 }, () => platform!.connect({ localAddress: HOSTILE })),
    );
    const invented = Array.from({ length: 30 }, (_, i) => `rate-invented-${i}`);
    // The bucket runs dry while these arrive, not before: what it holds later is bounded by the
    // time since here, however slowly the machine runs the steps between.
    const burstSentAt = Date.now();
    for (let i = 0; i < invented.length; i++) hostile[i % 3]!.join(invented[i]!, `h-${i}`);
    await Promise.all(hostile.map((s) => s.ping()));
    const refused = hostile.flatMap((s) => refusedPages(s, "rate_limited"));
    // The burst, and at most what the rate refilled while the frames arrived.
    expect(invented.length - refused.length).toBeGreaterThanOrEqual(burst);
    expect(invented.length - refused.length).toBeLessThanOrEqual(burst + 1);

    // A second later the rate has refilled `ratePerS` new pages, and no more than the rate allows
    // for the time since the burst began (a second and a little on an idle machine, so no more than
    // `ratePerS + 1` there): a fixed bound would count the machine's delays as refills.
    await sleep(1000);
    const later = Array.from({ length: ratePerS + 3 }, (_, i) => `rate-later-${i}`);
    const before = refusedPages(hostile[0]!, "rate_limited").length;
    await joinAll(hostile[0]!, later);
    const refilledMs = Date.now() - burstSentAt;
    const refusedLater = refusedPages(hostile[0]!, "rate_limited").length - before;
    expect(later.length - refusedLater).toBeGreaterThanOrEqual(ratePerS);
    expect(later.length - refusedLater).toBeLessThanOrEqual(Math.floor((ratePerS * refilledMs) / 1000) + 1);

    // With its budget spent again, the address still joins a page another socket here has.
    const spent = hostile.flatMap((s) => refusedPages(s, "rate_limited")).length;
    for (const [i, s] of hostile.entries()) s.join("rate-popular", `h-popular-${i}`);
    await neighbour.waitForViewers("rate-popular", 4);
    expect(hostile.flatMap((s) => refusedPages(s, "rate_limited")).length).toBe(spent);
    for (const page of hostile.flatMap((s) => refusedPages(s, "rate_limited")))
      expect((await platform.counter(page)).viewers).toBe(0);
    expect(hostile.flatMap((s) => s.errors())[0]!.message).toMatch(
      /too many new pages from this address; retry in \d+ s/,
    );

    // Another address is not affected.
    neighbour.join("rate-neighbour-new", "n");
    await neighbour.waitForViewers("rate-neighbour-new", 1);
  });
});
