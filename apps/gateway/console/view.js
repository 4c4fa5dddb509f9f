/*
 * Which view the console shows, and the state every view shares, owned here alone: the token that
 * tells a late answer its view has gone, the timer of the shown view's next read, and the section
 * the router focused last. Other modules read them and change them only through these functions.
 */
import { $ } from "./dom.js";

/** How often the cluster view and the page view reload (ms). */
export const REFRESH_MS = 2000;

const sections = ["sign-in", "pages", "page", "cluster"];
let refreshTimer;
/**
 * Bumped by every navigation (stop) and every listing read: a load or a socket of an earlier view
 * (or an earlier read) that finishes late sees it changed and neither writes into the page nor
 * schedules anything.
 */
export let view = 0;
/** The section shown last: a navigation within it keeps the focus where it is. */
export let shownSection;

/** A new token: whatever held the previous one is out of date. */
export function nextView() {
  return ++view;
}

/** Runs `read` in `ms`, in place of any read the shown view had due: a view has one timer. */
export function setRefresh(read, ms) {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(read, ms);
}

/** No read is due any more. */
export function clearRefresh() {
  clearTimeout(refreshTimer);
  refreshTimer = undefined;
}

/** Notes the section shown (undefined: none, as when signed out) once the router has focused it. */
export function setShownSection(id) {
  shownSection = id;
}

const TITLES = { "sign-in": "Sign in", pages: "Pages", cluster: "Cluster" };

/** Shows one view; `title` names it in the tab (a page's id). */
export function show(id, title = TITLES[id]) {
  document.title = `${title} · livecount console`;
  for (const s of sections) $(s).hidden = s !== id;
  $("nav").hidden = id === "sign-in";
  for (const a of $("nav").querySelectorAll("a")) {
    const current = (id === "page" ? "pages" : id) === a.getAttribute("href").slice(2);
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}
