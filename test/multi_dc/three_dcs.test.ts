/**
 * Three data centers of real processes (test/support/multi_dc.ts) where NATS links A–B and B–C but
 * never A–C: each nats-server lists only its neighbours and rejects any other cluster, so gossip
 * cannot join A and C, and NATS never forwards a message from one gateway to another. A's real-time
 * updates therefore never reach C, nor do A's heartbeats (C never counts A as live). A like made in
 * A must still show in C, with no traffic in C: B merges A's entries into its own store, and B's
 * anti-entropy with C serves every DC's entries it holds, not only its own (issue 9, "Done means").
 */
import { expect, test } from "vitest";
import { describeWithServers } from "../support/servers.js";
import {
  CONVERGE_MS,
  addLikes,
  counterMetric,
  expectTotals,
  pageIds,
  readRaw,
  readTotals,
  type Expected,
} from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { startDataCenters, type MultiDc } from "../support/multi_dc.js";

const PAGES = 20;
/**
 * Periodic anti-entropy for this test only: A's like reaches C at B's or C's next comparison, so
 * within about one period plus a transfer. Other multi-DC tests set it far beyond their length.
 */
const ANTI_ENTROPY_MS = 2000;
const TEST_TIMEOUT_MS = 60_000;

/** Throws unless A's and C's nats-servers have no gateway connection with each other, either way. */
async function expectAandCApart(multi: MultiDc): Promise<void> {
  for (const [dc, other] of [
    ["A", "C"],
    ["C", "A"],
  ] as const) {
    const { outbound, inbound } = await multi.dc(dc).gatewayConnections();
    expect(outbound, `${dc}'s outbound gateways`).not.toContain(other);
    expect(inbound, `${dc}'s inbound gateways`).not.toContain(other);
  }
}

describeWithServers("multi-dc - three data centers, A and C never linked", () => {
  test(
    "multi-dc - a like made in A shows in C through B's anti-entropy, with A and C never linked and no traffic in C",
    async () => {
      const multi = await startDataCenters({
        dcs: ["A", "B", "C"],
        counters: 1,
        links: [
          ["A", "B"],
          ["B", "C"],
        ],
        env: { LIVECOUNT_ANTI_ENTROPY_MS: String(ANTI_ENTROPY_MS) },
      });
      const [a, b, c] = [multi.dc("A"), multi.dc("B"), multi.dc("C")];
      await expectAandCApart(multi);

      const pages = pageIds("abc", PAGES);
      const likes = new Map(pages.map((page, i) => [page, i + 1]));
      const expected = (page: string): Expected => ({ viewers: 0, likes: likes.get(page)! });
      const receivedBefore = await counterMetric(
        c,
        "livecount_counter_anti_entropy_pages_total",
        'direction="received"',
      );
      const likedAt = Date.now();
      await addLikes(a, likes, "A");

      // B gets A's updates in real time and keeps them in its own store.
      await eventually(() => expectTotals(b, pages, expected), {
        timeoutMs: CONVERGE_MS,
        message: "B shows A's likes",
      });
      const bExactAt = Date.now();
      const rawInB = await readRaw(b, pages);
      for (const page of pages) expect(rawInB.get(page)!.counters.likes?.A?.p).toBe(likes.get(page));

      // C only ever hears B: A's likes arrive with B's (or C's) next digest comparison.
      await eventually(() => expectTotals(c, pages, expected), {
        timeoutMs: CONVERGE_MS,
        message: "C shows A's likes",
      });
      const cExactAt = Date.now();

      // C never heard A: A's entries count there (likes never expire) but A is not a live DC.
      for (const body of (await readTotals(c, pages)).values()) expect(body.dcs).not.toContain("A");
      const receivedByC =
        (await counterMetric(c, "livecount_counter_anti_entropy_pages_total", 'direction="received"')) -
        receivedBefore;
      expect(receivedByC).toBeGreaterThanOrEqual(PAGES);
      await expectAandCApart(multi);

      const report = {
        pages: PAGES,
        antiEntropyMs: ANTI_ENTROPY_MS,
        likedToExactInBMs: bExactAt - likedAt,
        likedToExactInCMs: cExactAt - likedAt,
        antiEntropyPagesReceivedByC: receivedByC,
      };
      console.info(`multi-dc three DCs: ${JSON.stringify(report)}`);
    },
    TEST_TIMEOUT_MS,
  );
});
