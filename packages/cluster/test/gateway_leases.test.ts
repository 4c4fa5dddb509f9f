import { describe, expect, test } from "vitest";
import { HEARTBEATS_PER_LEASE } from "../src/cluster_config.js";
import { GatewayLeases, SUPERSEDE_SILENCE } from "../src/gateway_leases.js";
import { RELEASED_MEMORY_CAP, RELEASED_MEMORY_MS, ReleasedGateways } from "../src/released_gateways.js";

const LEASE_MS = 10_000;
const T0 = 1_000_000;

describe("cluster - gateway leases", () => {
  test("cluster - a gateway expires exactly when its lease has passed without being heard", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-a", T0, 6_000);
    leases.holds("gw-a", "p1");
    expect(leases.expire(T0 + 5_999)).toEqual([]);
    const expired = leases.expire(T0 + 6_000);
    expect(expired.map((l) => [l.gateway, [...l.pages]])).toEqual([["gw-a", ["p1"]]]);
    expect(leases.size).toBe(0);
    expect(leases.expire(T0 + 60_000)).toEqual([]);
  });

  test("cluster - a presence request keeps the lease its heartbeat announced; an unknown gateway gets the default", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-a", T0, 3_000);
    leases.touch("gw-a", T0 + 1_000);
    expect(leases.expire(T0 + 3_999)).toEqual([]);
    expect(leases.expire(T0 + 4_000)).toHaveLength(1);

    leases.touch("gw-b", T0);
    expect(leases.expire(T0 + LEASE_MS - 1)).toEqual([]);
    expect(leases.expire(T0 + LEASE_MS)).toHaveLength(1);
  });

  test("cluster - a later incarnation of a gateway's node supersedes the earlier ones once they miss a heartbeat, never a later one or another node's", () => {
    const leases = new GatewayLeases(LEASE_MS);
    const silence = (SUPERSEDE_SILENCE * LEASE_MS) / HEARTBEATS_PER_LEASE;
    leases.touch("gw-1-old", T0, LEASE_MS, { node: "gw-1", startedAt: T0 - 50_000 });
    leases.holds("gw-1-old", "p1");
    leases.touch("gw-2-a", T0, LEASE_MS, { node: "gw-2", startedAt: T0 - 40_000 });
    leases.touch("legacy", T0);
    leases.touch("gw-1-new", T0 + 100, LEASE_MS, { node: "gw-1", startedAt: T0 });
    expect(leases.hasLaterIncarnation("gw-1-old")).toBe(true);
    expect(leases.hasLaterIncarnation("gw-1-new")).toBe(false);
    // Heard within the silence: it may be alive (a second process under the node id).
    expect(leases.supersede(T0 + silence - 1)).toEqual([]);
    const superseded = leases.supersede(T0 + silence);
    expect(superseded.map((l) => [l.gateway, [...l.pages]])).toEqual([["gw-1-old", ["p1"]]]);
    expect(leases.knows("gw-1-old")).toBe(false);
    expect([leases.knows("gw-1-new"), leases.knows("gw-2-a"), leases.knows("legacy")]).toEqual([
      true,
      true,
      true,
    ]);
    // Gateways that never said which node they are (an older release), and the only incarnation
    // of a node, are superseded by nothing, however silent.
    expect(leases.supersede(T0 + LEASE_MS - 1)).toEqual([]);
  });

  test("cluster - a node's other incarnations are its siblings, whatever start each reports: a restart's clock may have stepped back", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-old", T0, LEASE_MS, { node: "gw", startedAt: T0 - 1_000 });
    // Restarted after its clock stepped back half a minute (NTP at boot): it reports an earlier start.
    leases.touch("gw-new", T0 + 100, LEASE_MS, { node: "gw", startedAt: T0 - 30_000 });
    leases.touch("other", T0, LEASE_MS, { node: "other", startedAt: T0 });
    leases.touch("legacy", T0);
    expect(leases.siblingIncarnations("gw-new")).toEqual(["gw-old"]);
    expect(leases.siblingIncarnations("gw-old")).toEqual(["gw-new"]);
    expect(leases.siblingIncarnations("other")).toEqual([]);
    expect(leases.siblingIncarnations("legacy")).toEqual([]);
  });

  test("cluster - an earlier incarnation that keeps beating is never superseded", () => {
    const leases = new GatewayLeases(LEASE_MS);
    const interval = LEASE_MS / HEARTBEATS_PER_LEASE;
    leases.touch("gw-a", T0, LEASE_MS, { node: "gw", startedAt: 1 });
    leases.touch("gw-b", T0, LEASE_MS, { node: "gw", startedAt: 2 });
    for (let now = T0; now < T0 + 10 * LEASE_MS; now += interval) {
      leases.touch("gw-a", now, LEASE_MS);
      leases.touch("gw-b", now, LEASE_MS);
      expect(leases.supersede(now + interval - 1)).toEqual([]);
    }
  });

  test("cluster - presence sent over a connection the gateway has replaced since (a lower reconnect count than one heard) is stale: it neither renews the lease nor lowers the count", () => {
    const leases = new GatewayLeases(LEASE_MS);
    expect(leases.acceptPresence("gw-a", T0, 2)).toBe("accepted");
    expect(leases.acceptPresence("gw-a", T0 + 5_000, 0)).toBe("stale");
    expect(leases.acceptPresence("gw-a", T0 + 5_000, 1)).toBe("stale");
    // The stale ones renewed nothing: the lease runs from T0.
    expect(leases.expire(T0 + LEASE_MS - 1)).toEqual([]);
    expect(leases.acceptPresence("gw-a", T0 + LEASE_MS - 1, 2)).toBe("accepted");
    expect(leases.acceptPresence("gw-a", T0 + LEASE_MS - 1, 3)).toBe("accepted");
    expect(leases.acceptPresence("gw-a", T0 + LEASE_MS - 1, 2)).toBe("stale");
    expect(leases.expire(T0 + 2 * LEASE_MS - 1)).toHaveLength(1);
    // A gateway not known starts where its first request says; another gateway's counts are its own.
    expect(leases.acceptPresence("gw-b", T0, 0)).toBe("accepted");
    expect(leases.acceptPresence("gw-c", T0, 5)).toBe("accepted");
    expect(leases.acceptPresence("gw-c", T0, 4)).toBe("stale");
  });

  test("cluster - a late message never moves a lease back in time", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-a", T0 + 5_000);
    leases.touch("gw-a", T0);
    expect(leases.expire(T0 + LEASE_MS + 4_999)).toEqual([]);
  });

  test("cluster - a gateway going down is forgotten with the pages it held", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-a", T0);
    leases.holds("gw-a", "p1");
    leases.holds("gw-a", "p2");
    expect([...(leases.drop("gw-a", T0, true)?.pages ?? [])]).toEqual(["p1", "p2"]);
    expect(leases.drop("gw-a", T0, true)).toBeUndefined();
    expect(leases.pagesOf("gw-a").size).toBe(0);
  });

  test("cluster - time the node did not run is added to every lease, so a stall expires nobody", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-a", T0);
    leases.touch("gw-b", T0 + 9_000);
    // Frozen for 30 s: the heartbeats sent meanwhile wait in the socket.
    leases.compensateSilence(T0 + 9_000, T0 + 39_000);
    expect(leases.expire(T0 + 39_999)).toEqual([]);
    expect(leases.expire(T0 + 40_000).map((l) => l.gateway)).toEqual(["gw-a"]);
  });

  test("cluster - a silence gives each lease back only the part of it after the gateway was last heard", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("before", T0);
    // Heard during the silence (a bus that carried a little), and right after it.
    leases.touch("during", T0 + 20_000);
    leases.touch("after", T0 + 31_000);
    leases.compensateSilence(T0 + 5_000, T0 + 30_000);
    // before: 25 s back, lapses at T0 + 35 s; during: 10 s back, at T0 + 40 s; after: nothing, at T0 + 41 s.
    expect(leases.expire(T0 + 34_999)).toEqual([]);
    expect(leases.expire(T0 + 35_000).map((l) => l.gateway)).toEqual(["before"]);
    expect(leases.expire(T0 + 39_999)).toEqual([]);
    expect(leases.expire(T0 + 40_000).map((l) => l.gateway)).toEqual(["during"]);
    expect(leases.expire(T0 + 40_999)).toEqual([]);
    expect(leases.expire(T0 + 41_000).map((l) => l.gateway)).toEqual(["after"]);
  });

  test("cluster - a page that leaves memory is forgotten by every gateway's lease", () => {
    const leases = new GatewayLeases(LEASE_MS);
    for (const g of ["gw-a", "gw-b"]) {
      leases.touch(g, T0);
      leases.holds(g, "p1");
      leases.holds(g, "p2");
    }
    leases.forgetPage("p1");
    expect(leases.anyHolds("p1")).toBe(false);
    expect([...leases.pagesOf("gw-b")]).toEqual(["p2"]);
  });

  test("cluster - a page is only recorded for a gateway that was heard", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.holds("never-heard", "p1");
    expect(leases.anyHolds("p1")).toBe(false);
    expect(leases.size).toBe(0);
  });

  test("cluster - a heartbeat's lease replaces the default assumed for a gateway first heard by a request", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-a", T0);
    leases.touch("gw-a", T0, 3_000);
    expect(leases.expire(T0 + 2_999)).toEqual([]);
    expect(leases.expire(T0 + 3_000).map((l) => l.gateway)).toEqual(["gw-a"]);
  });

  test("cluster - an incarnation let go is not heard again: a late heartbeat or request changes nothing until a probe takes it back", () => {
    const leases = new GatewayLeases(LEASE_MS);
    const interval = LEASE_MS / HEARTBEATS_PER_LEASE;
    const origin = { node: "gw", startedAt: T0 };
    for (const g of ["gone", "down"]) leases.touch(g, T0, LEASE_MS, origin);
    leases.touch("lapsed", T0, LEASE_MS, { node: "other", startedAt: T0 });
    leases.touch("superseded", T0, LEASE_MS, { node: "gw", startedAt: T0 - 1 });
    leases.touch("new", T0 + 5_000, LEASE_MS, { node: "gw", startedAt: T0 + 1 });
    leases.drop("gone", T0, false);
    leases.drop("down", T0, true);
    expect(leases.supersede(T0 + 5_000).map((l) => l.gateway)).toEqual(["superseded"]);
    expect(
      leases
        .expire(T0 + LEASE_MS)
        .map((l) => l.gateway)
        .sort(),
    ).toEqual(["lapsed"]);
    for (const g of ["lapsed", "superseded", "gone"]) {
      expect(leases.released(g)).toBe("unproven");
      expect(leases.touch(g, T0 + LEASE_MS, LEASE_MS, origin)).toBe(false);
      expect(leases.acceptPresence(g, T0 + LEASE_MS, 7)).toBe("unproven");
      expect(leases.knows(g)).toBe(false);
    }
    // Nor do they take a place among their node's incarnations again.
    expect(leases.siblingIncarnations("new")).toEqual([]);
    expect(leases.hasLaterIncarnation("new")).toBe(false);
    // One that said it went down is never asked.
    expect(leases.acceptPresence("down", T0 + LEASE_MS, 0)).toBe("down");
    expect(leases.shouldProbe("down", T0 + LEASE_MS)).toBe(false);
    leases.readmit("down", T0 + LEASE_MS, 0);
    expect(leases.released("down")).toBe("down");
    // The others are asked once a heartbeat interval, and one that answers is heard again.
    expect(leases.shouldProbe("lapsed", T0 + LEASE_MS)).toBe(true);
    expect(leases.shouldProbe("lapsed", T0 + LEASE_MS + interval - 1)).toBe(false);
    expect(leases.shouldProbe("lapsed", T0 + LEASE_MS + interval)).toBe(true);
    // Taken back with the reconnects its answer reported: what a NATS server held back with fewer
    // is older than its resync, and dropped.
    leases.readmit("lapsed", T0 + LEASE_MS, 2);
    expect(leases.released("lapsed")).toBeUndefined();
    expect(leases.knows("lapsed")).toBe(true);
    expect(leases.acceptPresence("lapsed", T0 + LEASE_MS, 1)).toBe("stale");
    expect(leases.acceptPresence("lapsed", T0 + LEASE_MS, 2)).toBe("accepted");
  });

  test("cluster - releases are remembered for RELEASED_MEMORY_MS, at most RELEASED_MEMORY_CAP of them, the oldest forgotten first", () => {
    const leases = new GatewayLeases(LEASE_MS);
    leases.touch("gw-a", T0);
    leases.drop("gw-a", T0, false);
    leases.expire(T0 + RELEASED_MEMORY_MS - 1);
    expect(leases.released("gw-a")).toBe("unproven");
    leases.expire(T0 + RELEASED_MEMORY_MS);
    expect(leases.released("gw-a")).toBeUndefined();
    // Forgotten, it is heard as any gateway never known: its lease bounds what it holds.
    expect(leases.acceptPresence("gw-a", T0 + RELEASED_MEMORY_MS, 0)).toBe("accepted");

    expect(RELEASED_MEMORY_CAP).toBeGreaterThanOrEqual(1024);
    const released = new ReleasedGateways(60_000, 3);
    for (const [i, g] of ["a", "b", "c", "d"].entries()) released.add(g, T0 + i, false, 1_000);
    expect(released.size).toBe(3);
    expect(["a", "b", "c", "d"].map((g) => released.of(g))).toEqual([
      undefined,
      "unproven",
      "unproven",
      "unproven",
    ]);
    // Let go again, a release is as new as the latest.
    released.add("b", T0 + 10, true, 1_000);
    released.add("e", T0 + 11, false, 1_000);
    expect(["b", "c", "d", "e"].map((g) => released.of(g))).toEqual([
      "down",
      undefined,
      "unproven",
      "unproven",
    ]);
    released.prune(T0 + 60_003);
    expect(["b", "d", "e"].map((g) => released.of(g))).toEqual(["down", undefined, "unproven"]);
    released.prune(T0 + 60_011);
    expect(released.size).toBe(0);
  });
});
