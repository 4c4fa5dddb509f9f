/**
 * Types for pages and apps that use `<live-count>`. The element itself ships as the classic script
 * `dist/livecount.js` (served by the gateway at `/livecount.js`); `import "@livecount/widget"` in a
 * bundler runs that script and registers the element.
 */
import type { LiveCountDetail } from "./livecount.js";

export type { LiveCountDetail };

/** The event every `<live-count>` dispatches (and bubbles) on each update. */
export type LiveCountEvent = CustomEvent<LiveCountDetail>;

declare global {
  interface HTMLElementEventMap {
    livecount: LiveCountEvent;
  }
}
