import { Gauge, type Registry } from "prom-client";
import type { DcLiveness } from "./dc_liveness.js";

/**
 * Every remote DC this process has heard, as gauges read at each scrape (same names on gateways and
 * counter nodes, under their prefix): `<prefix>_dc_up{dc}` (1 live, 0 down: its viewers do not count)
 * and `<prefix>_dc_silence_seconds{dc}` (since its last heartbeat; a DC is down past its lease).
 */
export function registerDcMetrics(
  registry: Registry,
  prefix: string,
  liveness: DcLiveness,
  now: () => number,
  /**
   * DCs this process expects to hear (LIVECOUNT_PEER_DCS): one not heard since the process started
   * is reported down, so an alert on it fires even when every process restarted while it was down.
   */
  expected: readonly string[] = [],
): void {
  new Gauge({
    name: `${prefix}_dc_up`,
    help: "1 while the remote data center is live (heard within its lease), 0 while it is down",
    labelNames: ["dc"],
    registers: [registry],
    collect() {
      const heard = liveness.remotes();
      for (const r of heard) this.set({ dc: r.dc }, r.live ? 1 : 0);
      for (const dc of expected) if (!heard.some((r) => r.dc === dc)) this.set({ dc }, 0);
    },
  });
  new Gauge({
    name: `${prefix}_dc_silence_seconds`,
    help: "Seconds since the remote data center's last heartbeat",
    labelNames: ["dc"],
    registers: [registry],
    collect() {
      const t = now();
      for (const r of liveness.remotes()) this.set({ dc: r.dc }, Math.max(0, t - r.lastHeard) / 1000);
    },
  });
}
