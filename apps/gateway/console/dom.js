/*
 * The console's DOM helpers: elements by id, elements built with their attributes and children,
 * tables, counted nouns, and how a view's read that failed is shown. No state of their own.
 */

export const $ = (id) => document.getElementById(id);

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

export function table(id, headers, rows) {
  const t = $(id);
  t.replaceChildren(
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c))))),
  );
}

export function plural(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

/**
 * A view's read succeeded (`err` undefined) or failed: on failure what it shows is greyed out (its
 * buttons off) and the error says since when; the next success clears both.
 */
export function noteRead(area, notice, what, err) {
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
