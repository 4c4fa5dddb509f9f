/**
 * `<live-count page="…">`: how many people view a page right now, live.
 *
 * Loaded by one classic script tag from a gateway, on any origin:
 *
 *   <script src="https://gateway.example/livecount.js"></script>
 *   <live-count page="article-1"></live-count> watching
 *
 * Attributes (all observed; changing one rebinds the element):
 * - `page`: the page id (protocol v1: 1..128 printable ASCII). An invalid id is never sent: the
 *   element gets `data-error="invalid_page"`. Errors the server sends for a page (e.g.
 *   `too_many_pages`) set `data-error` to their code the same way; a page refused as
 *   `rate_limited` (too many new pages from one address) is asked for again after a few seconds,
 *   one refused as `too_many_pages` when another page leaves the socket. A `rate_limited` error
 *   naming no page (frames past the socket's budget, dropped) closes the socket: the next one
 *   sends what the elements want from scratch.
 *   Each page error and invalid id is also written to the console (`console.warn`).
 * - `server`: origin of the gateway (`https://eu.example.com`; `eu.example.com:8443` is that host
 *   on this page's scheme); default: the origin that served this script. One WebSocket per server,
 *   at `/ws`.
 * - `mode="watch"`: show the count without counting as a viewer (`watch` instead of `join`).
 * - `counter="likes"`: show that durable counter instead of the viewers.
 * - `show="active"`: show the viewers who have the page in front of them (a visible tab) instead of
 *   all viewers; `show="connections"`: the open sockets joined to the page. Each tab tells the
 *   server whether it is visible (`document.visibilityState`) when it joins and when that changes.
 * - `placeholder`: text shown until the first count arrives (default: nothing).
 * - `token`: a join token for a private page, minted by the site's server (the SDK's
 *   `signJoinToken`); sent with the join or watch. Without a valid one the server answers
 *   `unauthorized` and the element gets `data-error="unauthorized"`.
 *
 * Every element on a page shares one socket per server and one join (or watch) per page id. The
 * socket offers the `livecount.counts` subprotocol: a window's changes of all its pages come in one
 * `counts` frame; `count` frames (a gateway that predates them) are read the same.
 * Each update dispatches a bubbling `livecount` CustomEvent with
 * `{ page, viewers, active, connections, counters, dcs, lag_ms }`.
 *
 * This file is the element; its sockets are in connections.ts. Size matters (the bundle must stay
 * under 2 KB gzipped): internal names are short, there are no classes beyond the element and no
 * dependencies. Frame shapes mirror @livecount/protocol.
 */

import { ID, NONE, conn, queue, type Conn, type Page } from "./connections.js";

/** What a `livecount` event carries: the latest value of the element's page. */
export interface LiveCountDetail {
  readonly page: string;
  /** Distinct viewers with an open socket on the page, summed over live data centers. */
  readonly viewers: number;
  /** Viewers with the page in front of them (a visible tab). */
  readonly active?: number;
  /** Open sockets joined to the page. */
  readonly connections?: number;
  /** Durable counters of the page by name (likes, reactions, ...). */
  readonly counters: Readonly<Record<string, number>>;
  /** The data centers whose entries make up the value: fewer than usual while one is cut off. */
  readonly dcs?: readonly string[];
  /** How stale the stalest of them is, in ms: a page can show the value as approximate meanwhile. */
  readonly lag_ms?: number;
}

/** The compact number format (`1.2K`), made at the first value shown. */
let format: Intl.NumberFormat | undefined;

class LiveCount extends HTMLElement {
  /** Current binding: the connection and page this element is counted in. (`declare`: no field emit.) */
  declare b?: [Conn, Page];

  static get observedAttributes(): string[] {
    return ["page", "server", "mode", "counter", "placeholder", "token", "show"];
  }

  connectedCallback(): void {
    if (!this.hasAttribute("aria-live")) this.setAttribute("aria-live", "polite");
    this.u();
  }

  disconnectedCallback(): void {
    this.u();
  }

  attributeChangedCallback(): void {
    this.u();
  }

  /** (Re)binds the element to its server and page, or unbinds it once out of the document. */
  u(): void {
    const b = this.b;
    if (b) {
      b[1].e.delete(this);
      queue(b[0]);
      this.b = undefined;
    }
    if (this.isConnected) {
      const c = conn(this.getAttribute("server"));
      const id = this.getAttribute("page") || "";
      let p = c.p.get(id);
      if (!p) {
        c.p.set(id, (p = { e: new Set(), s: NONE, x: ID.test(id) ? undefined : "invalid_page" }));
        if (p.x) console.warn("livecount:", id, p.x);
      }
      p.e.add(this);
      this.b = [c, p];
      queue(c);
      this.r();
    }
  }

  /** Renders the page's latest value (or error) and announces it with a `livecount` event. */
  r(): void {
    const p = this.b![1];
    const d = p.c;
    const k = this.getAttribute("counter");
    const v = this.getAttribute("show");
    if (p.x) this.setAttribute("data-error", p.x);
    else this.removeAttribute("data-error");
    const text = d
      ? (format ||= new Intl.NumberFormat(undefined, { notation: "compact" })).format(
          k ? d.counters[k] || 0 : (v == "active" || v == "connections" ? d[v] : d.viewers) || 0,
        )
      : this.getAttribute("placeholder") || "";
    // Rewriting identical text would make screen readers announce it again.
    if (this.textContent != text) this.textContent = text;
    if (d) this.dispatchEvent(new CustomEvent("livecount", { detail: d, bubbles: true }));
  }
}

if (!customElements.get("live-count")) customElements.define("live-count", LiveCount);
