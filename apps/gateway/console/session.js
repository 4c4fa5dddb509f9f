/*
 * The operator's session: the admin key, kept in sessionStorage for the tab's life, and the two
 * ways a view ends: stop, at every navigation, and signOut, when the key is refused or the operator
 * signs out. Every way goes through stop, so nothing of the view before stays running.
 */
import { $ } from "./dom.js";
import { stopChart } from "./live_chart.js";
import { clearRefresh, nextView, setShownSection, show } from "./view.js";

export const KEY_STORAGE = "livecount:admin-key";

export function key() {
  return sessionStorage.getItem(KEY_STORAGE) ?? "";
}

export function stop() {
  nextView();
  clearRefresh();
  stopChart();
}

export function signOut(message = "") {
  sessionStorage.removeItem(KEY_STORAGE);
  stop();
  setShownSection(undefined);
  $("sign-in-error").textContent = message;
  show("sign-in");
  $("admin-key").focus();
}
