/*
 * The cluster view (#/cluster): this data center's counter nodes, gateways and the data centers it
 * hears, with the recent changes this gateway saw (GET /v1/admin/status), read again every
 * REFRESH_MS while it is shown; and the purge of old tombstones (POST /v1/admin/purge).
 */
import { api } from "./api.js";
import { $, el, noteRead, plural, table } from "./dom.js";
import { REFRESH_MS, setRefresh, show, view } from "./view.js";

function ago(ts) {
  const s = Math.max(0, Math.round((Date.now() - ts) / 1000));
  if (s < 1) return "now";
  if (s < 120) return `${s} s ago`;
  return s < 7200 ? `${Math.floor(s / 60)} min ago` : `${Math.floor(s / 3600)} h ago`;
}

async function loadCluster(mine = view) {
  const s = await api("/v1/admin/status");
  if (mine !== view) return;
  $("cluster-status").textContent =
    `Data center ${s.dc}: ${plural(s.nodes.length, "counter node")}, ${plural(s.gateways.length, "gateway")}, ` +
    `${s.ring.partitions} partitions. Updated ${new Date(s.ts).toLocaleTimeString()}.`;
  table(
    "dcs-table",
    ["Data center", "Status", "Lag", "Last heard"],
    s.dcs.map((d) => [
      d.local ? `${d.dc} (this one)` : d.dc,
      el("span", { class: d.live ? "up" : "down" }, d.live ? "live" : "down"),
      `${d.lag_ms} ms`,
      ago(d.last_heard),
    ]),
  );
  table(
    "nodes-table",
    [
      "Node",
      "Status",
      "Partitions held",
      "Epochs",
      "Actors",
      "Waiting to flush",
      "Flush lag",
      "Bootstrapped",
      "Resyncing",
      "Incarnation",
    ],
    s.nodes.map((n) =>
      n.error
        ? [n.id, el("span", { class: "error" }, `not answering (${n.error})`), "", "", "", "", "", "", "", ""]
        : [
            n.id,
            el("span", { class: n.ready ? "up" : "down" }, n.ready ? "ready" : "not ready"),
            `${n.partitions.length} of ${s.ring.assigned[n.id] ?? 0} assigned`,
            epochRange(n.partitions),
            n.actors,
            n.dirty,
            `${n.flush_lag_ms} ms`,
            n.bootstrapped,
            resyncText(n.resyncing),
            n.incarnation.slice(0, 8),
          ],
    ),
  );
  table(
    "gateways-table",
    ["Gateway", "Sockets", "Viewers", "Last heard"],
    s.gateways.map((g) => [
      g.id === s.gateway ? `${g.id} (this one)` : g.id,
      g.sockets,
      g.viewers,
      ago(g.last_heard),
    ]),
  );
  const events = s.events ?? [];
  $("events-status").textContent =
    events.length === 0
      ? `No changes in the last hour, as gateway ${s.gateway} saw them (since it started).`
      : `As gateway ${s.gateway} saw them since it started, newest first: the last hour, at most 50.`;
  table(
    "events-table",
    ["When", "What", "Change"],
    events.map((e) => [
      `${new Date(e.at).toLocaleTimeString()} (${ago(e.at)})`,
      `${e.kind === "node" ? "counter node" : "gateway"} ${e.id}`,
      el("span", { class: EVENT_CLASS[e.event] ?? "" }, EVENT_TEXT[e.event]?.[e.kind] ?? e.event),
    ]),
  );
}

/** What each change of the status API's `events` says, per kind. */
const EVENT_TEXT = {
  joined: { node: "joined the ring", gateway: "started" },
  restarted: { node: "new incarnation (restarted, or back from a cut)" },
  left: { node: "left the ring (stopped, its partitions handed over)", gateway: "stopped" },
  silent: {
    node: "went silent (not heard for its lease: killed, frozen or cut off)",
    gateway: "went silent (not heard for its lease)",
  },
  back: { node: "back on the ring (the same process)", gateway: "heard again (the same process)" },
};
const EVENT_CLASS = { joined: "up", back: "up", left: "down", silent: "down", restarted: "" };

/** "dc2: 3 partitions" per remote DC with anti-entropy transfers under way, or "–". */
function resyncText(resyncing) {
  const busy = Object.entries(resyncing ?? {}).filter(([, n]) => n > 0);
  return busy.length ? busy.map(([dc, n]) => `${dc}: ${n} partition${n === 1 ? "" : "s"}`).join(", ") : "–";
}

function epochRange(partitions) {
  if (partitions.length === 0) return "–";
  const epochs = partitions.map((p) => p.epoch);
  const lo = Math.min(...epochs);
  const hi = Math.max(...epochs);
  return lo === hi ? String(lo) : `${lo}–${hi}`;
}

export async function showCluster() {
  show("cluster");
  $("cluster-error").textContent = "";
  $("cluster-data").classList.remove("stale");
  delete $("cluster-data").dataset.shownAt;
  const mine = view;
  const refresh = async () => {
    try {
      await loadCluster(mine);
      if (mine === view) noteRead("cluster-data", "cluster-error", "the status", undefined);
    } catch (err) {
      if (mine === view) noteRead("cluster-data", "cluster-error", "the status", err);
    }
    if (mine === view) setRefresh(refresh, REFRESH_MS);
  };
  await refresh();
}

export async function purge(days) {
  if (
    !confirm(
      `Purge deleted counters whose tombstones are older than ${days} days, in every data center? ` +
        "Their raw entries leave the store; readers see no change.",
    )
  )
    return;
  $("purge-status").textContent = "Purging…";
  try {
    const body = await api("/v1/admin/purge", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ older_than_s: days * 86_400 }),
    });
    const silent = body.nodes.filter((n) => n.error !== undefined).map((n) => `${n.id} (${n.error})`);
    $("purge-status").textContent =
      `Purged ${plural(body.counters, "counter")} on ${plural(body.pages, "page")} in ${body.dc}; ` +
      `kept ${body.kept} (written in several data centers, or changed since the delete).` +
      (body.failed > 0 ? ` ${plural(body.failed, "partition")} failed; purge again.` : "") +
      (body.waiting > 0
        ? ` ${plural(body.waiting, "partition")} wait until every data center is known to hold their tombstones; they go then.`
        : "") +
      (silent.length > 0 ? ` Not answered yet: ${silent.join(", ")}.` : "") +
      " Other data centers purge as they hear of it.";
  } catch (err) {
    $("purge-status").textContent = `Could not purge: ${err.message}`;
  }
}
