import { describe, expect, test } from "vitest";
import { AddressPages } from "../src/address_pages.js";
import { AddressRateLimiter } from "../src/rate_limits.js";

describe("gateway - pages per client address (unit)", () => {
  function setUp(max: number, burst: number) {
    let now = 0;
    const limiter = (what: string): AddressRateLimiter =>
      new AddressRateLimiter({ ratePerS: 1, burst, maxAddresses: 10, now: () => now, what });
    return {
      pages: new AddressPages(max, limiter("new pages"), limiter("new visitors")),
      advance: (ms: number) => (now += ms),
    };
  }

  test("gateway - an address takes pages up to its cap; a release makes room for one; another address is apart", () => {
    const { pages } = setUp(2, 100);
    expect(pages.take("a", "p1", false)).toBeUndefined();
    expect(pages.take("a", "p2", false)).toBeUndefined();
    expect(pages.take("a", "p3", false)).toMatchObject({ code: "too_many_pages", page: "p3" });
    expect(pages.take("b", "p3", false)).toBeUndefined();
    pages.release("a");
    expect(pages.take("a", "p3", false)).toBeUndefined();
    expect(pages.take("a", "p4", false)).toMatchObject({ code: "too_many_pages" });
  });

  test("gateway - only new pages spend the rate; a refused one counts nothing and its message says when to retry", () => {
    const { pages, advance } = setUp(10, 1);
    expect(pages.take("a", "new-1", true)).toBeUndefined();
    const refused = pages.take("a", "new-2", true);
    expect(refused).toMatchObject({ code: "rate_limited", page: "new-2" });
    expect(refused?.message).toBe("too many new pages from this address; retry in 1 s");
    // A page someone here has is free, and the refusal counted nothing against the cap.
    for (let i = 0; i < 9; i++) expect(pages.take("a", `held-${i}`, false)).toBeUndefined();
    expect(pages.take("a", "one-more", false)).toMatchObject({ code: "too_many_pages" });
    pages.release("a");
    advance(1000);
    expect(pages.take("a", "new-2", true)).toBeUndefined();
  });

  test("gateway - new viewer ids count as unique visitors up to the address's budget, then as viewers only until it refills", () => {
    const { pages, advance } = setUp(10, 2);
    expect([pages.newVisitor("a"), pages.newVisitor("a"), pages.newVisitor("a")]).toEqual([
      true,
      true,
      false,
    ]);
    // Another address has its own; pages spend none of it.
    expect(pages.newVisitor("b")).toBe(true);
    expect(pages.take("a", "p1", true)).toBeUndefined();
    advance(1000);
    expect([pages.newVisitor("a"), pages.newVisitor("a")]).toEqual([true, false]);
  });
});
