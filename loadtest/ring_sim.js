#!/usr/bin/env node
/**
 * What the ring and Redis Cluster's slots do with livecount's partitions, computed with the real
 * `HashRing` and `partitionOf` (packages/ring, built) for the capacity plan (docs/capacity.md):
 *
 *   1. balance: partitions and page load per counter node, over many random sets of node ids
 *      (shaped like LIVECOUNT_NODE_ID's default, drawn from a seeded PRNG), with synthetic pages
 *      spread by `partitionOf`, each page counting once (even) or by a Zipf popularity (skewed);
 *   2. growth: what adding one node (N -> N+1) moves, against the ideal 1/(N+1), and whether any
 *      partition moves anywhere but to the new node;
 *   3. a new LIVECOUNT_PARTITIONS on the same nodes (256 -> 4096): the pages whose partition
 *      number changes and the pages whose owner changes;
 *   4. Redis Cluster: how the partitions' hash tags (`{p<partition>}`, one slot per partition)
 *      spread over masters holding equal contiguous slot ranges, as `redis-cli --cluster create`
 *      assigns them.
 *
 *   node loadtest/ring_sim.js                        the defaults below (about 7 s on 2 cores)
 *   node loadtest/ring_sim.js --seeds 200 --pages 100000 --nodes 25,90
 *
 * Options (all optional):
 *   --seeds 1000             random sets of node ids per case
 *   --pages 1000000          synthetic page ids page-0..page-(n-1)
 *   --nodes 10,11            counter node counts; growth is measured from each N to N+1
 *   --partitions 256,4096    partition counts; the remap is measured between consecutive ones
 *   --vnodes 64              ring points per node (LIVECOUNT_VNODES's default)
 *   --zipf 1                 Zipf exponent s: the page of popularity rank k weighs 1 / k^s
 *   --masters 3,10,50        Redis Cluster master counts for the slot table
 *   --seed 1                 base seed; the same flags print the same tables
 *
 * Exits 1 if a partition ever moves to a node other than the one added.
 */
import { HashRing, MAX_PARTITIONS, partitionOf } from "@livecount/ring";
import calculateSlot from "cluster-key-slot";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { prng } from "./bench/lib/prng.js";

/** Redis Cluster's hash slots. */
const SLOTS = 16_384;

function parseOrExit(config) {
  try {
    return parseArgs(config);
  } catch (err) {
    console.error(err.message);
    process.exit(2);
  }
}

/** The command line's options, or a message and exit code 2. */
function readOptions() {
  const { values } = parseOrExit({
    options: {
      seeds: { type: "string", default: "1000" },
      pages: { type: "string", default: "1000000" },
      nodes: { type: "string", default: "10,11" },
      partitions: { type: "string", default: "256,4096" },
      vnodes: { type: "string", default: "64" },
      zipf: { type: "string", default: "1" },
      masters: { type: "string", default: "3,10,50" },
      seed: { type: "string", default: "1" },
    },
  });
  const int =
    (name, min, max = Number.MAX_SAFE_INTEGER) =>
    (text) => {
      const v = Number(text);
      if (!Number.isInteger(v) || v < min || v > max) {
        const allowed = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `in ${min}..${max}`;
        console.error(`--${name} takes integers ${allowed}, got ${text}`);
        process.exit(2);
      }
      return v;
    };
  const list = (name, min, max) => values[name].split(",").map(int(name, min, max));
  const zipf = Number(values.zipf);
  if (!Number.isFinite(zipf) || zipf < 0) {
    console.error(`--zipf takes a number >= 0, got ${values.zipf}`);
    process.exit(2);
  }
  return {
    seeds: int("seeds", 1)(values.seeds),
    pages: int("pages", 1)(values.pages),
    nodes: list("nodes", 1, 10_000),
    partitions: list("partitions", 1, MAX_PARTITIONS),
    vnodes: int("vnodes", 1, 1024)(values.vnodes),
    zipf,
    masters: list("masters", 1, SLOTS),
    seed: int("seed", 0, 0xffffffff)(values.seed),
  };
}

/**
 * The ids of node set `set`: `n-` and 8 hex digits, like a node without LIVECOUNT_NODE_ID. Drawn
 * from the set's own stream, so the first N ids of a set are the same whatever else is asked.
 */
function nodeIds(seed, set, count) {
  const rand = prng((seed + Math.imul(set + 1, 0x9e3779b1)) >>> 0);
  const ids = new Set();
  while (ids.size < count)
    ids.add(
      `n-${Math.floor(rand() * 0x1_0000_0000)
        .toString(16)
        .padStart(8, "0")}`,
    );
  return [...ids];
}

/** Pages per partition and Zipf weight per partition (shares of the whole, summing to 1). */
function spread(pagePartition, zipfWeight, partitions) {
  const pages = new Float64Array(partitions);
  const zipf = new Float64Array(partitions);
  for (let i = 0; i < pagePartition.length; i++) {
    pages[pagePartition[i]] += 1 / pagePartition.length;
    zipf[pagePartition[i]] += zipfWeight[i];
  }
  return { pages, zipf };
}

/** Owner index (into `ids`) of every partition of `ring`. */
function owners(ring, ids) {
  const index = new Map(ids.map((id, i) => [id, i]));
  const out = new Uint32Array(ring.partitionCount);
  for (let p = 0; p < ring.partitionCount; p++) out[p] = index.get(ring.ownerOf(p));
  return out;
}

/** max/mean and min/mean of what each of `count` holders gets, `holderOf[p]` holding partition p. */
function balance(holderOf, count, weights) {
  const got = new Float64Array(count);
  for (let p = 0; p < holderOf.length; p++) got[holderOf[p]] += weights === undefined ? 1 : weights[p];
  const mean = got.reduce((a, b) => a + b, 0) / count;
  let max = -Infinity;
  let min = Infinity;
  for (const g of got) {
    if (g > max) max = g;
    if (g < min) min = g;
  }
  return { max: max / mean, min: min / mean };
}

/** Nearest-rank percentile of ascending `sorted`. */
function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

const f2 = (x) => x.toFixed(2);
const pct = (x) => `${(x * 100).toFixed(1)}%`;
const int = (x) => Math.round(x).toLocaleString("en-US");

/** "p50 / p99 / worst" of a spread of max/mean ratios (high is bad). */
function highs(values) {
  const s = [...values].sort((a, b) => a - b);
  return `${f2(percentile(s, 50))} / ${f2(percentile(s, 99))} / ${f2(s[s.length - 1])}`;
}

/** "p50 / p1 / worst" of a spread of min/mean ratios (low is bad). */
function lows(values) {
  const s = [...values].sort((a, b) => a - b);
  return `${f2(percentile(s, 50))} / ${f2(percentile(s, 1))} / ${f2(s[0])}`;
}

/** "mean (min..max)" of a spread: the mean formatted by `fmt`, the extremes by `fmtEnds`. */
function range(values, fmt, fmtEnds = fmt) {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return `${fmt(mean)} (${fmtEnds(Math.min(...values))}..${fmtEnds(Math.max(...values))})`;
}

function table(title, header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => String(row[i]).length)));
  const line = (row) =>
    row
      .map((c, i) => String(c).padEnd(widths[i]))
      .join(" | ")
      .trimEnd();
  return [title, line(header), widths.map((w) => "-".repeat(w)).join("-|-"), ...rows.map(line), ""].join(
    "\n",
  );
}

/**
 * Slot ranges of `masters` masters as `redis-cli --cluster create` assigns them: master i gets
 * first..round(cursor + slotsPerNode - 1), cursor advancing by slotsPerNode (a C float), the
 * last master everything left. Returns the master of every slot.
 */
function slotMasters(masters) {
  const perNode = Math.fround(SLOTS / masters);
  const masterOf = new Uint32Array(SLOTS);
  let first = 0;
  let cursor = 0;
  for (let m = 0; m < masters; m++) {
    let last = Math.round(cursor + perNode - 1);
    if (last > SLOTS || m === masters - 1) last = SLOTS - 1;
    if (last < first) last = first;
    masterOf.fill(m, first, last + 1);
    first = last + 1;
    cursor += perNode;
  }
  return masterOf;
}

function main() {
  const o = readOptions();
  const started = performance.now();
  const maxNodes = Math.max(...o.nodes) + 1;

  // Pages: page-0..page-(n-1), each placed by the real partitionOf. Popularity rank = index + 1.
  const zipfWeight = new Float64Array(o.pages);
  let zipfTotal = 0;
  for (let i = 0; i < o.pages; i++) zipfTotal += zipfWeight[i] = 1 / Math.pow(i + 1, o.zipf);
  for (let i = 0; i < o.pages; i++) zipfWeight[i] /= zipfTotal;
  const byCount = new Map();
  for (const partitions of o.partitions) {
    const pagePartition = new Uint32Array(o.pages);
    for (let i = 0; i < o.pages; i++) pagePartition[i] = partitionOf(`page-${i}`, partitions);
    byCount.set(partitions, { pagePartition, ...spread(pagePartition, zipfWeight, partitions) });
  }

  // Pages of each (old partition, new partition) pair, for every consecutive pair of counts.
  const remaps = [];
  for (let k = 0; k + 1 < o.partitions.length; k++) {
    const [from, to] = [o.partitions[k], o.partitions[k + 1]];
    const a = byCount.get(from).pagePartition;
    const b = byCount.get(to).pagePartition;
    const cells = new Map();
    for (let i = 0; i < o.pages; i++) {
      const key = a[i] * to + b[i];
      const cell = cells.get(key) ?? { from: a[i], to: b[i], pages: 0, zipf: 0 };
      cell.pages += 1 / o.pages;
      cell.zipf += zipfWeight[i];
      cells.set(key, cell);
    }
    const list = [...cells.values()];
    const renumbered = list.filter((c) => c.from !== c.to).reduce((s, c) => s + c.pages, 0);
    remaps.push({ from, to, cells: list, renumbered, byNodes: new Map() });
  }

  const bal = new Map(); // `${partitions}/${nodes}` -> the case and its ratios over the sets
  const growth = new Map(); // same key -> the case and what moved in each set
  for (let set = 0; set < o.seeds; set++) {
    const ids = nodeIds(o.seed, set, maxNodes);
    for (const n of o.nodes) {
      const members = ids.slice(0, n);
      const ownersByCount = new Map();
      for (const partitions of o.partitions) {
        const { pages, zipf } = byCount.get(partitions);
        const ring = new HashRing(members, { partitions, vnodes: o.vnodes });
        // Members are ids[0..n-1], so owner indexes are 0..n-1, as balance() wants.
        const own = owners(ring, members);
        ownersByCount.set(partitions, own);
        const key = `${partitions}/${n}`;
        const b = bal.get(key) ?? {
          partitions,
          n,
          parts: [],
          partsMin: [],
          pages: [],
          pagesMin: [],
          zipf: [],
          zipfMin: [],
        };
        const rp = balance(own, n);
        const rg = balance(own, n, pages);
        const rz = balance(own, n, zipf);
        b.parts.push(rp.max);
        b.partsMin.push(rp.min);
        b.pages.push(rg.max);
        b.pagesMin.push(rg.min);
        b.zipf.push(rz.max);
        b.zipfMin.push(rz.min);
        bal.set(key, b);

        const grown = ring.withNode(ids[n]);
        const moved = ring.changedPartitions(grown);
        const g = growth.get(key) ?? { partitions, n, moved: [], pages: [], zipf: [], stray: 0 };
        let movedPages = 0;
        let movedZipf = 0;
        for (const p of moved) {
          if (grown.ownerOf(p) !== ids[n]) g.stray++;
          movedPages += pages[p];
          movedZipf += zipf[p];
        }
        g.moved.push(moved.length);
        g.pages.push(movedPages);
        g.zipf.push(movedZipf);
        growth.set(key, g);
      }
      for (const remap of remaps) {
        const a = ownersByCount.get(remap.from);
        const b = ownersByCount.get(remap.to);
        let pages = 0;
        let zipf = 0;
        for (const c of remap.cells) {
          if (a[c.from] !== b[c.to]) {
            pages += c.pages;
            zipf += c.zipf;
          }
        }
        const r = remap.byNodes.get(n) ?? { pages: [], zipf: [] };
        r.pages.push(pages);
        r.zipf.push(zipf);
        remap.byNodes.set(n, r);
      }
    }
  }

  const out = [];
  out.push(
    `ring simulation: ${int(o.seeds)} node-id sets, ${int(o.pages)} pages, vnodes ${o.vnodes}, ` +
      `Zipf s = ${o.zipf} (the hottest page is ${pct(zipfWeight[0])} of the skewed load), seed ${o.seed}\n`,
  );

  out.push(
    table(
      "1. balance per counter node: max/mean as p50 / p99 / worst, min/mean as p50 / p1 / worst, over the sets",
      [
        "partitions",
        "nodes",
        "mean partitions/node",
        "partitions max/mean",
        "partitions min/mean",
        "pages max/mean",
        "pages min/mean",
        "Zipf load max/mean",
        "Zipf load min/mean",
      ],
      [...bal.values()].map((b) => [
        b.partitions,
        b.n,
        f2(b.partitions / b.n),
        highs(b.parts),
        lows(b.partsMin),
        highs(b.pages),
        lows(b.pagesMin),
        highs(b.zipf),
        lows(b.zipfMin),
      ]),
    ),
  );

  out.push(
    table(
      "2. adding a node, N -> N+1: what moves, mean (min..max) over the sets",
      [
        "partitions",
        "N -> N+1",
        "partitions moved",
        "ideal P/(N+1)",
        "pages moved",
        "Zipf load moved",
        "ideal 1/(N+1)",
        "pages moved / ideal, p1..p99",
        "moved elsewhere than the new node",
      ],
      [...growth.values()].map((g) => {
        const ideal = 1 / (g.n + 1);
        const ratios = g.pages.map((x) => x / ideal).sort((a, b) => a - b);
        return [
          g.partitions,
          `${g.n} -> ${g.n + 1}`,
          range(g.moved, f2, int),
          f2(g.partitions * ideal),
          range(g.pages, pct),
          range(g.zipf, pct),
          pct(ideal),
          `${f2(percentile(ratios, 1))}..${f2(percentile(ratios, 99))}`,
          g.stray === 0 ? "none" : `${int(g.stray)} partitions`,
        ];
      }),
    ),
  );

  if (remaps.length > 0)
    out.push(
      table(
        "3. a new LIVECOUNT_PARTITIONS, same nodes: pages that change, mean (min..max) over the sets",
        [
          "partitions",
          "nodes",
          "pages with a new partition number",
          "pages with a new owner",
          "Zipf load with a new owner",
        ],
        remaps.flatMap((r) =>
          [...r.byNodes.entries()].map(([n, x]) => [
            `${r.from} -> ${r.to}`,
            n,
            pct(r.renumbered),
            range(x.pages, pct),
            range(x.zipf, pct),
          ]),
        ),
      ),
    );

  const slotRows = [];
  for (const partitions of o.partitions) {
    const { pages, zipf } = byCount.get(partitions);
    const slotOf = Array.from({ length: partitions }, (_, p) => calculateSlot(`lc:digest:{p${p}}`));
    const distinct = new Set(slotOf).size;
    for (const masters of o.masters) {
      const masterOfSlot = slotMasters(masters);
      const holder = slotOf.map((slot) => masterOfSlot[slot]);
      const rp = balance(holder, masters);
      const rg = balance(holder, masters, pages);
      const rz = balance(holder, masters, zipf);
      slotRows.push([
        partitions,
        masters,
        f2(partitions / masters),
        f2(rp.max),
        f2(rp.min),
        f2(rg.max),
        f2(rz.max),
        `${int(distinct)} of ${int(partitions)}`,
      ]);
    }
  }
  out.push(
    table(
      "4. Redis Cluster: partition tags {p0}..{pN-1} over masters with equal contiguous slot ranges (CRC16 mod 16384)",
      [
        "partitions",
        "masters",
        "mean partitions/master",
        "partitions max/mean",
        "partitions min/mean",
        "pages max/mean",
        "Zipf load max/mean",
        "distinct slots",
      ],
      slotRows,
    ),
  );

  out.push(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  console.log(out.join("\n"));
  const stray = [...growth.values()].reduce((s, g) => s + g.stray, 0);
  if (stray > 0) {
    console.error(`${stray} partitions moved to a node other than the one added`);
    process.exit(1);
  }
}

main();
