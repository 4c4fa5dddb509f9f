/** The pages of one socket without a Map per socket: none, one membership, or an array of them. */
import { describe, expect, test } from "vitest";
import {
  findPage,
  pageCount,
  pagesOf,
  withPage,
  withoutPage,
  type PageMembership,
  type SocketPages,
} from "../src/socket_pages.js";

const member = (page: string): PageMembership => ({
  page,
  viewer: undefined,
  active: false,
});

describe("gateway - the pages of a socket", () => {
  test("socket pages - one page is the membership itself, more are an array, none is undefined", () => {
    const a = member("a");
    const b = member("b");
    const c = member("c");
    let pages: SocketPages = withPage(undefined, a);
    expect(pages).toBe(a);
    expect(findPage(pages, "a")).toBe(a);
    expect(findPage(pages, "b")).toBeUndefined();
    pages = withPage(withPage(pages, b), c);
    expect(pageCount(pages)).toBe(3);
    expect(pagesOf(pages).map((m) => m.page)).toEqual(["a", "b", "c"]);
    expect(findPage(pages, "c")).toBe(c);
    pages = withoutPage(pages, b);
    expect(pagesOf(pages).map((m) => m.page)).toEqual(["a", "c"]);
    expect(findPage(pages, "b")).toBeUndefined();
    // Removing what is not there changes nothing.
    pages = withoutPage(pages, b);
    expect(pageCount(pages)).toBe(2);
    pages = withoutPage(withoutPage(pages, a), c);
    expect(pages).toBeUndefined();
    expect(pageCount(pages)).toBe(0);
    expect(pagesOf(pages)).toEqual([]);
  });

  test("socket pages - the list handed out stays whole while the socket's pages change", () => {
    const a = member("a");
    const b = member("b");
    let pages: SocketPages = withPage(withPage(undefined, a), b);
    const all = pagesOf(pages);
    for (const m of all) pages = withoutPage(pages, m);
    expect(all).toEqual([a, b]);
    expect(pages).toBeUndefined();
  });
});
