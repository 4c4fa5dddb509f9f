#!/usr/bin/env node
/**
 * Maps keyed by page id, alone: what building one costs as a plain object (Object.fromEntries, as
 * the gateway's resync and the decoders built them) against an object without prototype
 * (`pageRecordFrom`, `pageRecordOf`), and what decoding a heal's `ae_entries` costs per page with
 * the product's decoder. Page ids are new keys on nearly every message, which is what makes plain
 * objects slow: V8 derives a hidden class per new key. Not part of `run.js`: a tool for the heals'
 * profile.
 *
 *   node loadtest/bench/page_keyed.js [messages=5000] [pagesPerMessage=40] [rounds=3]
 *
 * Prints, per round, µs per page for each way of building, alternated in the same process, their
 * ratio, and the decode.
 */
import { performance } from "node:perf_hooks";
import { decodeMessage, encodeAeEntries, pageRecordFrom } from "@livecount/protocol";
import { round } from "./lib/measure.js";

const MESSAGES = Number(process.argv[2] ?? 5000);
const PER_MESSAGE = Number(process.argv[3] ?? 40);
const ROUNDS = Number(process.argv[4] ?? 3);

let next = 0;
/** Entries of one message's pages: ids never used before, as a heal brings them. */
function pagesOfMessage() {
  const minute = Math.floor(Date.now() / 60_000);
  return Array.from({ length: PER_MESSAGE }, () => [
    `heal-page-${next++}`,
    {
      likes: { dc1: { p: 2, n: 0 }, dc2: { p: 1, n: 0 } },
      [`@w:likes:${minute}`]: { dc1: { p: 1, n: 0 }, dc2: { p: 1, n: 0 } },
    },
  ]);
}

/** µs per page to build every message's map with `build`. */
function timeBuilding(build) {
  const messages = Array.from({ length: MESSAGES }, pagesOfMessage);
  const t0 = performance.now();
  let keys = 0;
  for (const entries of messages) keys += Object.keys(build(entries)).length;
  return ((performance.now() - t0) * 1000) / keys;
}

for (let r = 1; r <= ROUNDS; r++) {
  const plain = timeBuilding((entries) => Object.fromEntries(entries));
  const table = timeBuilding((entries) => pageRecordFrom(entries));
  const encoded = Array.from({ length: MESSAGES }, (_, i) =>
    encodeAeEntries({ from: "dc1", to: "dc2", partition: i % 256 }, pagesOfMessage(), { done: true }),
  );
  const t0 = performance.now();
  let pages = 0;
  for (const data of encoded) pages += Object.keys(decodeMessage(data).pages).length;
  const decodeUs = ((performance.now() - t0) * 1000) / pages;
  console.log(
    `round ${r}: ${MESSAGES * PER_MESSAGE} pages: plain object ${round(plain, 3)} µs/page, ` +
      `without prototype ${round(table, 3)} µs/page (${round(plain / table, 1)}x); ` +
      `ae_entries decoded at ${round(decodeUs, 2)} µs/page`,
  );
}
