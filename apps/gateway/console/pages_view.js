/*
 * The pages view (#/pages?prefix=…&n=…): the pages under a prefix with their totals, a listing page
 * at a time (GET /v1/admin/pages), read again every REFRESH_MS while it is shown. The listing's
 * cursors are remembered per prefix, so the URL names a listing page by its number.
 */
import { api } from "./api.js";
import { $, el, plural } from "./dom.js";
import { REFRESH_MS, clearRefresh, nextView, setRefresh, show, view } from "./view.js";

const PAGE_SIZE = 25;
/** Per prefix, the cursors of the listing pages seen so far: the first is "" (no cursor). */
const cursorsByPrefix = new Map();

/**
 * One listing page. `again`: the same listing read anew (every REFRESH_MS while it is shown), in
 * place, keeping the keyboard focus on the link it was on.
 */
export async function showPages(prefix, index, again = false) {
  clearRefresh();
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
  const mine = nextView();
  const readAgain = () => {
    if (mine === view) setRefresh(() => showPages(prefix, index, true), REFRESH_MS);
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

export function cursorsOf(prefix) {
  let cursors = cursorsByPrefix.get(prefix);
  if (cursors === undefined) cursorsByPrefix.set(prefix, (cursors = [""]));
  return cursors;
}

/** The listing's URL: `n`, the listing page, is one whose cursor this tab has seen. */
export function pagesHash(prefix, index) {
  const q = new URLSearchParams({ prefix });
  if (index > 0) q.set("n", String(index));
  return `#/pages?${q}`;
}
