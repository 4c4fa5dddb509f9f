/**
 * What a socket remembers of the viewer ids it left pages as: for the grace window only, and at
 * most a page limit's worth, the oldest being ended at once past it.
 */
import { describe, expect, test } from "vitest";
import { rememberLeft, takeLeft, type LeftViewers } from "../src/left_viewers.js";

const GRACE_MS = 3000;
const MAX = 3;

describe("gateway - viewers a socket left", () => {
  test("left viewers - remembered for the grace window, then forgotten", () => {
    const left: LeftViewers = new Map();
    const evicted: string[] = [];
    rememberLeft(left, "p", "v:a", 0, GRACE_MS, MAX, (page) => evicted.push(page));
    expect(takeLeft(left, "p", GRACE_MS - 1)).toBe("v:a");
    expect(takeLeft(left, "p", GRACE_MS - 1)).toBeUndefined();
    rememberLeft(left, "q", "v:b", 0, GRACE_MS, MAX, (page) => evicted.push(page));
    expect(takeLeft(left, "q", GRACE_MS)).toBeUndefined();
    expect(left.size).toBe(0);
    expect(evicted).toEqual([]);
  });

  test("left viewers - at most the page limit: at the limit nothing is ended, past it the oldest is", () => {
    const left: LeftViewers = new Map();
    const evicted: Array<[string, string]> = [];
    const evict = (page: string, viewer: string): void => void evicted.push([page, viewer]);
    for (let i = 0; i < MAX; i++) rememberLeft(left, `p${i}`, `v:${i}`, i, GRACE_MS, MAX, evict);
    expect(left.size).toBe(MAX);
    expect(evicted).toEqual([]);
    rememberLeft(left, "p-new", "v:new", 10, GRACE_MS, MAX, evict);
    expect(left.size).toBe(MAX);
    expect(evicted).toEqual([["p0", "v:0"]]);
    // Expired entries make room before anything live is ended.
    rememberLeft(left, "p-late", "v:late", 10 + GRACE_MS, GRACE_MS, MAX, evict);
    expect(evicted).toHaveLength(1);
    expect([...left.keys()]).toEqual(["p-late"]);
  });
});
