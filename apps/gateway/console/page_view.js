/*
 * The page view (#/page/<page id>): one page's viewers per data center and its counters with each
 * data center's raw entries (GET /v1/admin/pages/{page}), its peaks and unique visitors, a Delete
 * button per counter, and the live chart (live_chart.js). Its tables are read again every
 * REFRESH_MS, and soon after a count frame, so they agree with the headline.
 */
import { api } from "./api.js";
import { $, el, noteRead, plural, table } from "./dom.js";
import { chart, live, plot, showPresence, startChart } from "./live_chart.js";
import { stop } from "./session.js";
import { REFRESH_MS, clearRefresh, setRefresh, show, view } from "./view.js";

/** After a count frame, the page view's tables are read again this soon (ms), to agree with it. */
const FRAME_RELOAD_MS = 250;
const NO_COUNTERS = "No counters on this page.";
/** A busy page is read at most this often however fast its frames come (ms). */
const FRAME_READS_EVERY_MS = 1000;
/** The page's peaks and unique visitors change slowly: read this often (ms). */
const STATS_EVERY_MS = 10_000;

function entry(e) {
  return e ? `p ${e.p} · n ${e.n}` : "–";
}

/** Peaks and unique visitors (GET /v1/pages/{page}/stats): what the page saw before the view opened. */
function showStats(stats) {
  $("page-stats").dataset.peak = String(stats.peak_viewers["1h"]);
  $("page-stats").textContent =
    `Peak ${stats.peak_viewers["1h"]} in the last hour, ${stats.peak_viewers["24h"]} in the last day; ` +
    `${plural(stats.unique_visitors["24h"], "unique visitor")} in the last day (estimated).`;
}

async function loadPage(page, mine = view, withStats = true) {
  const [body, stats] = await Promise.all([
    api(`/v1/admin/pages/${encodeURIComponent(page)}`),
    // The peaks are a side note: the page's own tables show without them.
    withStats ? api(`/v1/pages/${encodeURIComponent(page)}/stats`).catch(() => undefined) : undefined,
  ]);
  if (mine !== view) return;
  showPresence(body);
  if (chart !== undefined && !live()) plot(body.viewers);
  if (stats !== undefined) showStats(stats);
  table(
    "viewers-table",
    ["Data center", "Entry", "Viewers", "Counts now"],
    Object.entries(body.viewers_by_dc).map(([dc, e]) => [
      dc,
      entry(e),
      e.p - e.n,
      e.live ? "yes" : "no (down)",
    ]),
  );
  const dcs = [
    ...new Set(body.counters.flatMap((c) => [...Object.keys(c.entries), ...Object.keys(c.tombstone)])),
  ].sort();
  table(
    "counters-table",
    ["Counter", "Value", ...dcs.map((dc) => `${dc} entry`), "Deleted at (changes seen)", ""],
    body.counters.map((c) => [
      c.name,
      c.deleted ? "deleted" : String(c.value),
      ...dcs.map((dc) => entry(c.entries[dc])),
      Object.keys(c.tombstone).length
        ? Object.entries(c.tombstone)
            .map(([dc, e]) => `${dc}: ${e.p}`)
            .join(", ")
        : "–",
      c.deleted
        ? ""
        : el(
            "button",
            { type: "button", class: "danger", onclick: () => deleteCounter(page, c.name) },
            `Delete ${c.name}`,
          ),
    ]),
  );
  const status = $("page-status");
  if (body.counters.length === 0) status.textContent = NO_COUNTERS;
  else if (status.textContent === NO_COUNTERS) status.textContent = "";
}

async function deleteCounter(page, counter) {
  if (
    !confirm(
      `Delete counter "${counter}" of page "${page}"? Readers stop seeing it at once, in every data center.`,
    )
  )
    return;
  try {
    await api(`/v1/pages/${encodeURIComponent(page)}/counters/${encodeURIComponent(counter)}`, {
      method: "DELETE",
      headers: { "idempotency-key": crypto.randomUUID() },
    });
    $("page-status").textContent = `Deleted ${counter}.`;
    await loadPage(page);
  } catch (err) {
    $("page-status").textContent = `Could not delete ${counter}: ${err.message}`;
  }
}

/** Empties the page view: nothing of the page shown before stays (its Delete buttons least of all). */
function clearPage() {
  for (const id of ["page-viewers", "page-active"]) $(id).textContent = "–";
  $("page-connections").textContent = "– connections";
  for (const id of ["page-stats", "page-status", "page-error", "live-status"]) $(id).textContent = "";
  $("viewers-table").replaceChildren();
  $("counters-table").replaceChildren();
  $("page-data").classList.remove("stale");
  delete $("page-data").dataset.shownAt;
  delete $("page-stats").dataset.peak;
}

export async function showPage(page) {
  show("page", page);
  $("page-title").textContent = page;
  clearPage();
  const mine = view;
  /**
   * When the next read is due (ms): a count frame brings it forward to FRAME_RELOAD_MS from now,
   * never back, and never sooner than FRAME_READS_EVERY_MS after the last read: a page whose frames
   * come faster is read about once a second, not at every frame, nor only once they stop. A frame
   * during a read asks for the next one after it.
   */
  let due = Infinity;
  let lastRead = 0;
  let reading = false;
  let soon = false;
  const schedule = (afterFrame) => {
    if (mine !== view) return;
    if (reading) {
      soon ||= afterFrame;
      return;
    }
    const at = afterFrame
      ? Math.max(Date.now() + FRAME_RELOAD_MS, lastRead + FRAME_READS_EVERY_MS)
      : Date.now() + REFRESH_MS;
    if (at >= due) return;
    due = at;
    setRefresh(refresh, at - Date.now());
  };
  let statsAt = -Infinity;
  const refresh = async () => {
    due = Infinity;
    clearRefresh();
    reading = true;
    lastRead = Date.now();
    const withStats = lastRead - statsAt >= STATS_EVERY_MS;
    if (withStats) statsAt = lastRead;
    try {
      await loadPage(page, mine, withStats);
      if (mine === view) noteRead("page-data", "page-error", "the page", undefined);
    } catch (err) {
      if (mine !== view) return;
      if (err.status === 400) {
        // An id the gateway refuses stays refused: nothing of a page to show, nothing to read again.
        clearPage();
        stop();
        $("page-error").textContent = `Not a page id the gateway takes: ${err.message}.`;
        return;
      }
      noteRead("page-data", "page-error", "the page", err);
    } finally {
      reading = false;
    }
    const afterFrame = soon;
    soon = false;
    schedule(afterFrame);
  };
  startChart(page, (frame) => {
    // A new peak: the stats say it with the next read, not up to STATS_EVERY_MS later.
    if (frame.viewers > Number($("page-stats").dataset.peak ?? Infinity)) statsAt = -Infinity;
    schedule(true);
  });
  await refresh();
}
