/*
 * The page view's live part: the chart of its viewers (uPlot, loaded before the console as the
 * global `uPlot`) and the headline, fed by count frames from a watch over the gateway's WebSocket
 * (a watch does not count as a viewer), or by the page view's reads while the socket is down.
 * The chart, its socket and its timers are this module's alone; stop() ends them with stopChart.
 */
import { $, plural } from "./dom.js";
import { view } from "./view.js";

/** How much of the viewers history the chart keeps (s). */
const CHART_WINDOW_S = 300;
/** The live chart's socket: retried after 1 s, up to this long between tries when refused (ms). */
const RECONNECT_MAX_MS = 10_000;

let reconnectTimer;
let socket;
export let chart;
let resizer;
let tick;
let chartData = [[], []];

/** A page's viewers, active viewers and connections, from its admin body or a count frame. */
export function showPresence(v) {
  $("page-viewers").textContent = String(v.viewers);
  $("page-active").textContent = String(v.active ?? "–");
  $("page-connections").textContent =
    v.connections === undefined ? "– connections" : plural(v.connections, "connection");
}

/** Adds a point to the chart now and forgets what left its window. */
export function plot(viewers) {
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
export function live() {
  return socket !== undefined && socket.readyState === WebSocket.OPEN && socket.watching === true;
}

export function startChart(page, onFrame) {
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
  // A watching socket was lost, and no count frame came since: the tries to reconnect that fail
  // meanwhile say so, rather than that live updates were never there.
  let lost = false;
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
      lost = false;
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
      const readsAnswer = $("page-data").dataset.shownAt !== undefined && $("page-error").textContent === "";
      let why = "Live updates unavailable; reconnecting.";
      if (ws.refusal !== undefined)
        why = `The gateway refused the watch for now (${ws.refusal}); asking again.`;
      else if (ws.watching || lost) why = "Live updates lost; reconnecting.";
      else if (!ws.opened && readsAnswer)
        why =
          "The gateway did not take the console's live socket (is this site's origin in LIVECOUNT_ALLOWED_ORIGINS?); trying again.";
      lost ||= ws.watching === true;
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

/** Ends the chart, its socket and its timers: part of stop(), at every navigation and sign-out. */
export function stopChart() {
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
