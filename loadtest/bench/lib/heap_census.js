/**
 * What a process's V8 heap holds, by kind of object: a heap snapshot taken over the inspector
 * protocol (HeapProfiler.takeHeapSnapshot, which collects garbage first), summed per type and
 * constructor. Two censuses subtracted and divided by the sockets opened in between list what one
 * socket retains (the memory bench prints it with `--set census=1`).
 */
import { inspectorSession } from "./measure.js";

/** Node types whose names are their contents (strings) or code: summed per type only. */
const BY_TYPE_ONLY = new Set([
  "string",
  "concatenated string",
  "sliced string",
  "code",
  "number",
  "bigint",
  "regexp",
]);

async function snapshotText(inspectPort) {
  const chunks = [];
  const session = await inspectorSession(inspectPort, (method, params) => {
    if (method === "HeapProfiler.addHeapSnapshotChunk") chunks.push(params.chunk);
  });
  await session.call("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
  session.close();
  return chunks.join("");
}

/** `type:name` -> { count, bytes } of the live heap of the process (shallow sizes). */
export async function heapCensus(inspectPort) {
  const snap = JSON.parse(await snapshotText(inspectPort));
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const width = fields.length;
  const [typeAt, nameAt, sizeAt] = ["type", "name", "self_size"].map((f) => fields.indexOf(f));
  const census = new Map();
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + typeAt]];
    const key = BY_TYPE_ONLY.has(type) ? type : `${type}:${snap.strings[snap.nodes[i + nameAt]]}`;
    const row = census.get(key) ?? { count: 0, bytes: 0 };
    row.count++;
    row.bytes += snap.nodes[i + sizeAt];
    census.set(key, row);
  }
  return census;
}

/** Rows that grew from `before` to `after`, per `per` (sockets), largest first: [key, count, bytes]. */
export function censusGrowth(before, after, per, top = 25) {
  const rows = [];
  for (const [key, a] of after) {
    const b = before.get(key) ?? { count: 0, bytes: 0 };
    const bytes = (a.bytes - b.bytes) / per;
    if (bytes > 0.5) rows.push([key, Math.round(((a.count - b.count) / per) * 100) / 100, Math.round(bytes)]);
  }
  return rows.sort((x, y) => y[2] - x[2]).slice(0, top);
}
