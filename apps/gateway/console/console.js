/*
 * The operators' console, served by every gateway at /admin. Plain DOM, no framework; the chart is
 * uPlot. Everything it shows comes from the status API (GET /v1/admin/...) with the admin key, kept
 * in sessionStorage for the tab's life; the live chart watches the page over the gateway's WebSocket
 * (a watch does not count as a viewer).
 *
 * Routes (the URL hash): #/pages?prefix=…&n=… (n: the listing page), #/page/<page id>, #/cluster.
 *
 * This module is the entry index.html loads: the router and the forms' handlers. Each view is a
 * module of its own (pages_view.js, page_view.js with live_chart.js, cluster_view.js); the state
 * they share is view.js's, the admin key and the one teardown session.js's, the API calls api.js's.
 */
import { purge, showCluster } from "./cluster_view.js";
import { $ } from "./dom.js";
import { showPage } from "./page_view.js";
import { cursorsOf, pagesHash, showPages } from "./pages_view.js";
import { KEY_STORAGE, key, signOut, stop } from "./session.js";
import { setShownSection, shownSection } from "./view.js";

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
  setShownSection(shown);
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
