/*
 * The operators' console, served by every gateway at /admin. Plain DOM, no framework; the chart is
 * uPlot. Everything it shows comes from the status API (GET /v1/admin/...) with the admin key, kept
 * in sessionStorage for the tab's life; the live chart watches the page over the gateway's WebSocket
 * (a watch does not count as a viewer).
 *
 * Routes (the URL hash): #/pages?prefix=…&n=… (n: the listing page), #/page/<page id>, #/cluster.
 */
"use strict";

(() => {
  const KEY_STORAGE = "livecount:admin-key";
  const PAGE_SIZE = 25;
  /** How often the cluster view and the page view reload (ms). */
  const REFRESH_MS = 2000;
  /** After a count frame, the page view's tables are read again this soon (ms), to agree with it. */
  const FRAME_RELOAD_MS = 250;
  const NO_COUNTERS = "No counters on this page.";
  /** How much of the viewers history the chart keeps (s). */
  const CHART_WINDOW_S = 300;
  /** A busy page is read at most this often however fast its frames come (ms). */
  const FRAME_READS_EVERY_MS = 1000;
  /** The page's peaks and unique visitors change slowly: read this often (ms). */
  const STATS_EVERY_MS = 10_000;
  /** A read the gateway has not answered in this long fails (a hung gateway shows as one) (ms). */
  const API_TIMEOUT_MS = 10_000;

  const $ = (id) => document.getElementById(id);
  const sections = ["sign-in", "pages", "page", "cluster"];
  let refreshTimer;
  let reconnectTimer;
  /**
   * Bumped by every navigation (stop) and every listing read: a load or a socket of an earlier view
   * (or an earlier read) that finishes late sees it changed and neither writes into the page nor
   * schedules anything.
   */
  let view = 0;
  /** The section shown last: a navigation within it keeps the focus where it is. */
  let shownSection;
  let socket;
  let chart;
  let resizer;
  let tick;
  let chartData = [[], []];
  /** Per prefix, the cursors of the listing pages seen so far: the first is "" (no cursor). */
  const cursorsByPrefix = new Map();
  /** The live chart's socket: retried after 1 s, up to this long between tries when refused (ms). */
  const RECONNECT_MAX_MS = 10_000;

  function key() {
    return sessionStorage.getItem(KEY_STORAGE) ?? "";
  }

  class HttpError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, init = {}) {
    let res;
    try {
      res = await fetch(path, {
        ...init,
        headers: { authorization: `Bearer ${key()}`, ...(init.headers ?? {}) },
        signal: AbortSignal.timeout(API_TIMEOUT_MS),
      });
    } catch (err) {
      throw err.name === "TimeoutError"
        ? new Error(`the gateway did not answer within ${API_TIMEOUT_MS / 1000} s`)
        : err;
    }
    const body = await res.json().catch(() => ({}));
    if (res.status === 401) {
      signOut("The admin key was refused.");
      throw new HttpError(401, "unauthorized", "signed out");
    }
    if (!res.ok)
      throw new HttpError(res.status, body?.error?.code ?? "error", body?.error?.message ?? res.statusText);
    return body;
  }

  const TITLES = { "sign-in": "Sign in", pages: "Pages", cluster: "Cluster" };

  /** Shows one view; `title` names it in the tab (a page's id). */
  function show(id, title = TITLES[id]) {
    document.title = `${title} · livecount console`;
    for (const s of sections) $(s).hidden = s !== id;
    $("nav").hidden = id === "sign-in";
    for (const a of $("nav").querySelectorAll("a")) {
      const current = (id === "page" ? "pages" : id) === a.getAttribute("href").slice(2);
      if (current) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c instanceof Node ? c : String(c));
    return node;
  }

  function table(id, headers, rows) {
    const t = $(id);
    t.replaceChildren(
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c))))),
    );
  }

  function ago(ts) {
    const s = Math.max(0, Math.round((Date.now() - ts) / 1000));
    if (s < 1) return "now";
    if (s < 120) return `${s} s ago`;
    return s < 7200 ? `${Math.floor(s / 60)} min ago` : `${Math.floor(s / 3600)} h ago`;
  }

  /**
   * A view's read succeeded (`err` undefined) or failed: on failure what it shows is greyed out (its
   * buttons off) and the error says since when; the next success clears both.
   */
  function noteRead(area, notice, what, err) {
    $(area).classList.toggle("stale", err !== undefined && $(area).dataset.shownAt !== undefined);
    if (err !== undefined) for (const b of $(area).querySelectorAll("button")) b.disabled = true;
    if (err === undefined) {
      $(area).dataset.shownAt = String(Date.now());
      $(notice).textContent = "";
      return;
    }
    const at = $(area).dataset.shownAt;
    $(notice).textContent =
      `Could not read ${what}: ${err.message}.` +
      (at !== undefined ? ` Shown: as of ${new Date(Number(at)).toLocaleTimeString()}.` : "");
  }

  function stop() {
    view++;
    clearTimeout(refreshTimer);
    refreshTimer = undefined;
    clearTimeout(reconnectTimer);
    reconnectTimer = undefined;
    if (socket) {
      socket.onclose = null;
      socket.close();
      socket = undefined;
    }
    clearInterval(tick);
    tick = undefined;
    resizer?.disconnect();
    resizer = undefined;
    if (chart) {
      chart.destroy();
      chart = undefined;
    }
  }

  function signOut(message = "") {
    sessionStorage.removeItem(KEY_STORAGE);
    stop();
    shownSection = undefined;
    $("sign-in-error").textContent = message;
    show("sign-in");
    $("admin-key").focus();
  }

  // --- pages ------------------------------------------------------------------------------------

  /**
   * One listing page. `again`: the same listing read anew (every REFRESH_MS while it is shown), in
   * place, keeping the keyboard focus on the link it was on.
   */
  async function showPages(prefix, index, again = false) {
    clearTimeout(refreshTimer);
    refreshTimer = undefined;
    if (!again) {
      show("pages");
      $("prefix").value = prefix;
      $("pages-status").textContent = "Loading…";
    }
    const cursors = cursorsOf(prefix);
    const cursor = cursors[index] ?? "";
    const q = new URLSearchParams({ prefix, limit: String(PAGE_SIZE) });
    if (cursor) q.set("cursor", cursor);
    // A newer listing (another click) or another view wins over this one if it answers late.
    const mine = ++view;
    const readAgain = () => {
      if (mine === view) refreshTimer = setTimeout(() => showPages(prefix, index, true), REFRESH_MS);
    };
    let body;
    try {
      body = await api(`/v1/admin/pages?${q}`);
    } catch (err) {
      if (mine === view) $("pages-status").textContent = `Could not list pages: ${err.message}`;
      readAgain();
      return;
    }
    if (mine !== view) return;
    cursors.length = index + 1;
    if (body.cursor) cursors.push(body.cursor);
    const focused = $("page-list").contains(document.activeElement)
      ? document.activeElement.getAttribute("href")
      : undefined;
    $("page-list").replaceChildren(
      ...body.pages.map((p) => {
        const counters = Object.entries(p.counters)
          .map(([name, value]) => `${name} ${value}`)
          .join(", ");
        return el(
          "li",
          {},
          el("a", { href: `#/page/${encodeURIComponent(p.page)}` }, p.page),
          el("span", {}, `${plural(p.viewers, "viewer")}${counters ? ` · ${counters}` : ""}`),
        );
      }),
    );
    const from = index * PAGE_SIZE + 1;
    const said =
      body.pages.length === 0
        ? `No pages${prefix ? ` starting with "${prefix}"` : ""}.`
        : `Pages ${from}–${from + body.pages.length - 1}${prefix ? ` starting with "${prefix}"` : ""}.`;
    // Unchanged, it is not written again: a screen reader would read it out at every refresh.
    if ($("pages-status").textContent !== said) $("pages-status").textContent = said;
    const pagerFocused = document.activeElement?.closest?.(".pager") ? document.activeElement : undefined;
    $("first-page").disabled = index === 0;
    $("previous-page").disabled = index === 0;
    $("next-page").disabled = !body.cursor;
    // A pager button that just turned off (Next on the last page) hands the focus to one still on.
    if (pagerFocused?.disabled) ($("next-page").disabled ? $("previous-page") : $("next-page")).focus();
    // Through the URL: Back from a page returns to this listing page.
    $("next-page").onclick = () => (location.hash = pagesHash(prefix, index + 1));
    $("previous-page").onclick = () => (location.hash = pagesHash(prefix, index - 1));
    $("first-page").onclick = () => (location.hash = pagesHash(prefix, 0));
    if (focused !== undefined)
      [...$("page-list").querySelectorAll("a")].find((a) => a.getAttribute("href") === focused)?.focus();
    readAgain();
  }

  function cursorsOf(prefix) {
    let cursors = cursorsByPrefix.get(prefix);
    if (cursors === undefined) cursorsByPrefix.set(prefix, (cursors = [""]));
    return cursors;
  }

  /** The listing's URL: `n`, the listing page, is one whose cursor this tab has seen. */
  function pagesHash(prefix, index) {
    const q = new URLSearchParams({ prefix });
    if (index > 0) q.set("n", String(index));
    return `#/pages?${q}`;
  }

  // --- one page ---------------------------------------------------------------------------------

  /** A page's viewers, active viewers and connections, from its admin body or a count frame. */
  function showPresence(v) {
    $("page-viewers").textContent = String(v.viewers);
    $("page-active").textContent = String(v.active ?? "–");
    $("page-connections").textContent =
      v.connections === undefined ? "– connections" : plural(v.connections, "connection");
  }

  function plural(n, noun) {
    return `${n} ${noun}${n === 1 ? "" : "s"}`;
  }

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

  /** Adds a point to the chart now and forgets what left its window. */
  function plot(viewers) {
    const now = Date.now() / 1000;
    chartData[0].push(now);
    chartData[1].push(viewers);
    while (chartData[0].length > 2 && chartData[0][0] < now - CHART_WINDOW_S) {
      chartData[0].shift();
      chartData[1].shift();
    }
    chart.setData(chartData);
  }

  /** The chart's width: its box's, which follows the window. */
  function chartWidth() {
    return Math.max(280, $("chart").clientWidth || 600);
  }

  /** Whether the live socket delivers count frames now: if not, the table reads feed the chart. */
  function live() {
    return socket !== undefined && socket.readyState === WebSocket.OPEN && socket.watching === true;
  }

  function startChart(page, onFrame) {
    chartData = [[], []];
    chart = new uPlot(
      {
        width: chartWidth(),
        height: 200,
        scales: {
          // Always the last CHART_WINDOW_S seconds, whatever the data holds.
          x: { time: true, range: () => [Date.now() / 1000 - CHART_WINDOW_S, Date.now() / 1000] },
          y: { range: (_u, _min, max) => [0, Math.max(1, max + 1)] },
        },
        series: [
          {},
          {
            label: "viewers",
            stroke: "#33415c",
            width: 2,
            fill: "rgba(51,65,92,0.08)",
            paths: uPlot.paths.stepped({ align: 1 }),
          },
        ],
        axes: [{}, { label: "viewers" }],
        legend: { show: false },
      },
      chartData,
      $("chart"),
    );
    const mine = view;
    resizer = new ResizeObserver(() => chart?.setSize({ width: chartWidth(), height: 200 }));
    resizer.observe($("chart"));
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
    let delayMs = 1000;
    const connect = () => {
      const ws = (socket = new WebSocket(url));
      ws.onopen = () => {
        ws.opened = true;
        ws.send(JSON.stringify({ type: "watch", page }));
      };
      ws.onmessage = (m) => {
        let frame;
        try {
          frame = JSON.parse(m.data);
        } catch {
          return;
        }
        if (mine !== view) return;
        if (frame.type === "error" && frame.code === "unauthorized") {
          // A private page: the console's socket carries no join token. The table reads go on.
          ws.onclose = null;
          ws.close();
          $("live-status").textContent =
            "No live updates: the page is private and the console's socket has no join token. The chart follows the reads every 2 s.";
          return;
        }
        if (frame.type === "error") {
          // Refused for now (a rate limit, a gateway shutting down): asked again after a while.
          ws.refusal = frame.code;
          ws.close();
          return;
        }
        if (frame.type !== "count" || frame.page !== page) return;
        ws.watching = true;
        delayMs = 1000;
        $("live-status").textContent = "";
        plot(frame.viewers);
        showPresence(frame);
        // The tables below say the same as the headline: read them again soon, not at the next refresh.
        onFrame?.(frame);
      };
      // A dropped socket comes back (the chart keeps its history), while this view is shown.
      ws.onclose = () => {
        if (mine !== view) return;
        // The reads answer while the socket is refused at once: not a gateway that is down.
        const readsAnswer =
          $("page-data").dataset.shownAt !== undefined && $("page-error").textContent === "";
        let why = "Live updates unavailable; reconnecting.";
        if (ws.refusal !== undefined)
          why = `The gateway refused the watch for now (${ws.refusal}); asking again.`;
        else if (ws.watching) why = "Live updates lost; reconnecting.";
        else if (!ws.opened && readsAnswer)
          why =
            "The gateway did not take the console's live socket (is this site's origin in LIVECOUNT_ALLOWED_ORIGINS?); trying again.";
        $("live-status").textContent = `${why} The chart follows the reads every 2 s meanwhile.`;
        reconnectTimer = setTimeout(connect, delayMs);
        delayMs = Math.min(RECONNECT_MAX_MS, delayMs * 2);
      };
    };
    connect();
    // Count frames come only on changes: the line is carried forward every second, while they come.
    tick = setInterval(() => {
      const last = chartData[1].at(-1);
      if (last !== undefined && live()) plot(last);
    }, 1000);
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

  async function showPage(page) {
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
      clearTimeout(refreshTimer);
      due = at;
      refreshTimer = setTimeout(refresh, at - Date.now());
    };
    let statsAt = -Infinity;
    const refresh = async () => {
      due = Infinity;
      refreshTimer = undefined;
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

  // --- cluster ----------------------------------------------------------------------------------

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
          ? [
              n.id,
              el("span", { class: "error" }, `not answering (${n.error})`),
              "",
              "",
              "",
              "",
              "",
              "",
              "",
              "",
            ]
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

  async function showCluster() {
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
      if (mine === view) refreshTimer = setTimeout(refresh, REFRESH_MS);
    };
    await refresh();
  }

  async function purge(days) {
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

  // --- routing ----------------------------------------------------------------------------------

  /** Shows the view the URL names, its heading focused (a screen reader says where it is). */
  function route() {
    stop();
    if (!key()) return signOut();
    const hash = location.hash || "#/pages";
    void routeTo(hash);
    const heading = { pages: "pages-title", page: "page-title", cluster: "cluster-title" };
    const shown = Object.keys(heading).find((id) => !$(id).hidden);
    // Within a view (Next, a search) the focus stays on what the operator used.
    if (shown !== undefined && shown !== shownSection) $(heading[shown]).focus();
    shownSection = shown;
  }

  function routeTo(hash) {
    if (hash.startsWith("#/page/")) {
      const raw = hash.slice("#/page/".length);
      if (raw === "") return (location.hash = "#/pages");
      let page;
      try {
        page = decodeURIComponent(raw);
      } catch {
        // Typed by hand, not encoded ("100%"): the id as written.
        page = raw;
      }
      return showPage(page);
    }
    if (hash === "#/cluster") return showCluster();
    const q = new URLSearchParams(hash.split("?")[1] ?? "");
    const prefix = q.get("prefix") ?? "";
    const n = Number(q.get("n") ?? 0);
    if (Number.isInteger(n) && n >= 0 && n < cursorsOf(prefix).length) return showPages(prefix, n);
    // A listing page whose cursor this tab has not seen (a link from another tab): the first, and the
    // URL says so.
    history.replaceState(null, "", pagesHash(prefix, 0));
    return showPages(prefix, 0);
  }

  $("sign-in").addEventListener("submit", async (e) => {
    e.preventDefault();
    const candidate = $("admin-key").value.trim();
    const button = $("sign-in-button");
    button.disabled = true;
    $("sign-in-error").textContent = "";
    let res;
    try {
      res = await fetch("/v1/admin/status", { headers: { authorization: `Bearer ${candidate}` } });
    } catch (err) {
      $("sign-in-error").textContent = `Could not reach the gateway: ${err.message}.`;
      return;
    } finally {
      button.disabled = false;
    }
    if (res.status !== 200) {
      $("sign-in-error").textContent =
        res.status === 401 ? "That is not the admin key." : `The gateway answered ${res.status}.`;
      return;
    }
    sessionStorage.setItem(KEY_STORAGE, candidate);
    $("admin-key").value = "";
    $("sign-in-error").textContent = "";
    route();
  });
  $("search").addEventListener("submit", (e) => {
    e.preventDefault();
    const prefix = $("prefix").value;
    const target = `#/pages?${new URLSearchParams({ prefix })}`;
    if (location.hash === target) route();
    else location.hash = target;
  });
  $("purge").addEventListener("submit", (e) => {
    e.preventDefault();
    void purge(Number($("purge-days").value));
  });
  $("sign-out").addEventListener("click", () => signOut());
  window.addEventListener("hashchange", route);
  route();
})();
