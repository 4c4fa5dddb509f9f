import { describe, expect, it } from "vitest";
import {
  assertToken,
  dcUpdatesSubject,
  gatewaySubject,
  gatewaysSubject,
  InvalidSubjectError,
  isSubject,
  KEYS_SUBJECTS,
  keysSubjectDc,
  keysAckSubject,
  keysMissedFrom,
  keysMissedSubject,
  keysMissedSubjects,
  partitionKeysSubject,
  nodeSubject,
  nodesSubject,
  pageFromSubject,
  pageSubject,
} from "../src/index.js";
import { isSubjectPattern, patternMatches, tokensOf } from "../src/subject_syntax.js";

const FIRST_PRINTABLE = 0x21;
const LAST_PRINTABLE = 0x7e;
const PRINTABLE = Array.from({ length: LAST_PRINTABLE - FIRST_PRINTABLE + 1 }, (_, i) =>
  String.fromCharCode(FIRST_PRINTABLE + i),
);
const PAGE_TOKEN = /^lc\.page\.7\.[A-Za-z0-9_-]+$/;
const RANDOM_PAGES = 20_000;
const MAX_PAGE_LENGTH = 128;

/** mulberry32: a small seeded generator, so a failure can be replayed with LIVECOUNT_TEST_SEED. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function checkPages(pages: Iterable<string>, context: string): void {
  const seen = new Map<string, string>();
  for (const page of pages) {
    const subject = pageSubject(page, 7);
    expect(PAGE_TOKEN.test(subject), `${context}: ${JSON.stringify(page)} -> ${subject}`).toBe(true);
    expect(isSubject(subject)).toBe(true);
    expect(pageFromSubject(subject), `${context}: round trip of ${JSON.stringify(page)}`).toBe(page);
    const other = seen.get(subject);
    if (other !== undefined && other !== page) {
      throw new Error(`${context}: ${JSON.stringify(page)} and ${JSON.stringify(other)} share ${subject}`);
    }
    seen.set(subject, page);
  }
}

describe("subjects - page subjects", () => {
  it("encodes every page id of up to two printable characters injectively into one safe token", () => {
    const pages = [...PRINTABLE];
    for (const a of PRINTABLE) for (const b of PRINTABLE) pages.push(a + b);
    checkPages(pages, "exhaustive");
  });

  it("encodes random page ids of up to 128 characters injectively into one safe token", () => {
    const seed = Number(process.env.LIVECOUNT_TEST_SEED ?? Date.now() % 2 ** 32);
    console.log(`subjects - random page ids, seed ${seed} (replay with LIVECOUNT_TEST_SEED=${seed})`);
    const next = rng(seed);
    // Biased towards the characters that could break a subject if they leaked through.
    const alphabet = [...PRINTABLE, ".", ".", "*", "*", ">", ">", " ", "\t", "é", "€"];
    const pages = new Set<string>();
    while (pages.size < RANDOM_PAGES) {
      const length = 1 + Math.floor(next() * MAX_PAGE_LENGTH);
      let page = "";
      for (let i = 0; i < length; i++) page += alphabet[Math.floor(next() * alphabet.length)];
      pages.add(page);
    }
    checkPages(pages, `seed ${seed}`);
  });

  it("gives pages that look like wildcards or several tokens a subject of their own", () => {
    for (const page of [">", "*", "a.*", "a.>", "a b", "a.b", " ", "..", "lc.page.x"]) {
      const subject = pageSubject(page, 7);
      expect(tokensOf(subject)).toHaveLength(4);
      expect(subject.split(".").slice(2)).not.toContain("*");
      expect(subject).not.toContain(">");
    }
  });

  it("refuses an empty page id", () => {
    expect(() => pageSubject("", 7)).toThrow(InvalidSubjectError);
  });

  it("gives a DC's own updates of a partition a subject no page or partition subscription matches", () => {
    const subject = dcUpdatesSubject("dc-eu_1", 7);
    expect(subject).toBe("lc.dcupdates.dc-eu_1.7");
    expect(isSubject(subject)).toBe(true);
    // Not a page subject: owners' partition subscriptions (lc.page.<part>.*) never see it.
    expect(pageFromSubject(subject)).toBeUndefined();
    expect(patternMatches(tokensOf("lc.page.7.*"), tokensOf(subject))).toBe(false);
    expect(() => dcUpdatesSubject("d c", 7)).toThrow(InvalidSubjectError);
    expect(() => dcUpdatesSubject("dc1", -1)).toThrow(InvalidSubjectError);
  });

  it("gives each DC's keys of a partition a subject its queue group's wildcard matches, naming the DC", () => {
    const subject = partitionKeysSubject("dc-eu_1", 7);
    expect(subject).toBe("lc.keys.dc-eu_1.7");
    expect(patternMatches(tokensOf(KEYS_SUBJECTS), tokensOf(subject))).toBe(true);
    expect(patternMatches(tokensOf("lc.page.7.*"), tokensOf(subject))).toBe(false);
    expect(keysSubjectDc(subject)).toBe("dc-eu_1");
    expect(keysSubjectDc(dcUpdatesSubject("dc1", 7))).toBeUndefined();
    expect(() => partitionKeysSubject("d c", 7)).toThrow(InvalidSubjectError);
    expect(() => partitionKeysSubject("dc1", -1)).toThrow(InvalidSubjectError);
  });

  it("gives a DC's request for another's held keys a subject of that DC's nodes, naming the asking DC, apart from the keys", () => {
    const subject = keysMissedSubject("dc-eu_1", "dc2");
    expect(subject).toBe("lc.keysmissed.dc-eu_1.dc2");
    expect(patternMatches(tokensOf(keysMissedSubjects("dc-eu_1")), tokensOf(subject))).toBe(true);
    expect(patternMatches(tokensOf(keysMissedSubjects("dc2")), tokensOf(subject))).toBe(false);
    expect(patternMatches(tokensOf(KEYS_SUBJECTS), tokensOf(subject))).toBe(false);
    expect(keysMissedFrom(subject)).toBe("dc2");
    for (const other of ["lc.keysmissed.dc1", "lc.keysmissed.dc1.", "lc.keys.dc1.7", "lc.keysmissed.dc1.a.b"])
      expect(keysMissedFrom(other), other).toBeUndefined();
    expect(() => keysMissedSubject("dc1", "d c")).toThrow(InvalidSubjectError);
    expect(() => keysMissedSubjects("*")).toThrow(InvalidSubjectError);
  });

  it("gives a keys acknowledgement a subject of the sending node alone, apart from the keys and the requests", () => {
    const subject = keysAckSubject("dc-eu_1", "n-7");
    expect(subject).toBe("lc.keysack.dc-eu_1.n-7");
    expect(patternMatches(tokensOf(KEYS_SUBJECTS), tokensOf(subject))).toBe(false);
    expect(patternMatches(tokensOf(keysMissedSubjects("dc-eu_1")), tokensOf(subject))).toBe(false);
    expect(() => keysAckSubject("dc1", "n.1")).toThrow(InvalidSubjectError);
    expect(() => keysAckSubject(">", "n1")).toThrow(InvalidSubjectError);
  });

  it("reads back only subjects the encoder would produce", () => {
    for (const subject of [
      "lc.page.",
      "lc.page.YQ",
      "lc.page.a.b",
      "lc.page.7.YR",
      "lc.page.7.YQ=",
      "lc.page.07.YQ",
      "lc.page.-1.YQ",
      "lc.node.x",
      "lc.page.*",
      "x",
    ]) {
      expect(pageFromSubject(subject), subject).toBeUndefined();
    }
  });
});

describe("subjects - ids", () => {
  it("builds node, heartbeat and gateway subjects from valid ids", () => {
    expect(nodeSubject("dc1", "node-7_a")).toBe("lc.node.dc1.node-7_a");
    expect(nodesSubject("eu-west")).toBe("lc.nodes.eu-west");
    expect(gatewaysSubject("eu-west")).toBe("lc.gateways.eu-west");
  });

  it("gives every gateway incarnation id, any printable ASCII of any length, one literal subject of its own", () => {
    const ids = ["gw-1", "gw.1", "gw-1.*", ">", "x".repeat(73), "gw 1"];
    const subjects = ids.map((id) => gatewaySubject("dc1", id));
    for (const subject of subjects) {
      expect(isSubject(subject), subject).toBe(true);
      expect(subject.split(".").slice(0, 3)).toEqual(["lc", "gateway", "dc1"]);
      expect(subject.split(".")).toHaveLength(4);
    }
    expect(new Set(subjects).size).toBe(ids.length);
    expect(subjects).not.toContain(gatewaysSubject("dc1"));
    expect(() => gatewaySubject("dc1", "")).toThrow(InvalidSubjectError);
  });

  it("rejects ids outside [A-Za-z0-9_-]{1,64} with InvalidSubjectError", () => {
    for (const bad of ["", "a.b", "*", ">", "a b", "é", "a\n", "x".repeat(65)]) {
      expect(() => assertToken("dc", bad), JSON.stringify(bad)).toThrow(InvalidSubjectError);
      expect(() => nodesSubject(bad)).toThrow(/^dc must be/);
      expect(() => nodeSubject("dc1", bad)).toThrow(/^node must be/);
      expect(() => gatewaysSubject(bad)).toThrow(InvalidSubjectError);
      expect(() => gatewaySubject(bad, "gw")).toThrow(InvalidSubjectError);
    }
    expect(() => assertToken("node", "x".repeat(64))).not.toThrow();
  });
});

describe("subjects - NATS subject syntax", () => {
  it("accepts literal subjects and rejects empty tokens, wildcards and whitespace", () => {
    for (const ok of ["a", "a.b.c", "lc.page.YQ", "_INBOX.x-y", "é.ü"]) {
      expect(isSubject(ok), ok).toBe(true);
    }
    for (const bad of [
      "",
      ".",
      "a.",
      ".a",
      "a..b",
      "*",
      ">",
      "a.*",
      "a.>",
      "a*",
      "a>b",
      "a b",
      "a\tb",
      "a\u0000",
    ]) {
      expect(isSubject(bad), JSON.stringify(bad)).toBe(false);
    }
  });

  it("accepts '*' anywhere and '>' last as whole tokens of a pattern", () => {
    for (const ok of ["*", ">", "a.*", "*.b", "a.>", "*.*.>"]) expect(isSubjectPattern(ok), ok).toBe(true);
    for (const bad of ["", "a.>.b", ">.a", "a*", "*a", "a.b>", "a. b"]) {
      expect(isSubjectPattern(bad), JSON.stringify(bad)).toBe(false);
    }
  });

  it("matches patterns by NATS rules", () => {
    const cases: [string, string, boolean][] = [
      ["a.b", "a.b", true],
      ["a.*", "a.b", true],
      ["a.*", "a", false],
      ["a.*", "a.b.c", false],
      ["a.>", "a", false],
      ["a.>", "a.b", true],
      ["a.>", "a.b.c", true],
      [">", "a", true],
      ["*.b.*", "a.b.c", true],
      ["*.b.*", "a.c.c", false],
    ];
    for (const [pattern, subject, expected] of cases) {
      expect(patternMatches(tokensOf(pattern), tokensOf(subject)), `${pattern} ~ ${subject}`).toBe(expected);
    }
  });
});
