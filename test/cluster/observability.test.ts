/**
 * The Grafana dashboard (infra/grafana/livecount.json) and the Prometheus alert rules
 * (infra/prometheus/alerts.yml) are checked against what a real deployment exposes: both files load
 * (the dashboard against the fields Grafana needs to import it, the rules as Prometheus rule groups),
 * and every metric either of them queries is one that a gateway or a counter node of a running
 * cluster (nats-server, redis-server, processes from the built output) lists in its /metrics.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { load } from "js-yaml";
import { afterAll, beforeAll, expect, test } from "vitest";
import { TestCluster } from "../support/cluster.js";
import { validate, type Schema } from "../support/json_schema.js";
import { describeWithServers } from "../support/servers.js";

const ROOT = process.cwd();

/** What Grafana needs to import a dashboard, and what ours promises on top (a datasource variable). */
const DASHBOARD_SCHEMA: Schema = {
  type: "object",
  required: ["title", "uid", "schemaVersion", "panels", "templating", "time"],
  properties: {
    title: { type: "string", minLength: 1 },
    uid: { type: "string", pattern: "^[A-Za-z0-9_-]{1,40}$" },
    schemaVersion: { type: "integer", minimum: 30 },
    time: { type: "object", required: ["from", "to"] },
    templating: {
      type: "object",
      required: ["list"],
      properties: {
        list: {
          type: "array",
          minItems: 1,
          items: { type: "object", required: ["name", "type"], properties: { type: { type: "string" } } },
        },
      },
    },
    panels: {
      type: "array",
      minItems: 1,
      items: {
        type: "object",
        required: ["id", "type", "title", "gridPos", "targets", "datasource"],
        properties: {
          id: { type: "integer", minimum: 1 },
          type: { enum: ["timeseries", "stat", "gauge", "table", "bargauge"] },
          title: { type: "string", minLength: 1 },
          datasource: {
            type: "object",
            required: ["type", "uid"],
            properties: { type: { const: "prometheus" }, uid: { const: "${datasource}" } },
          },
          gridPos: {
            type: "object",
            required: ["x", "y", "w", "h"],
            properties: {
              x: { type: "integer", minimum: 0, maximum: 23 },
              y: { type: "integer", minimum: 0 },
              w: { type: "integer", minimum: 1, maximum: 24 },
              h: { type: "integer", minimum: 1 },
            },
          },
          targets: {
            type: "array",
            minItems: 1,
            items: {
              type: "object",
              required: ["refId", "expr"],
              properties: { refId: { type: "string" }, expr: { type: "string", minLength: 1 } },
            },
          },
        },
      },
    },
  },
};

const DURATION = "^[0-9]+(ms|s|m|h|d)$";
const RULES_SCHEMA: Schema = {
  type: "object",
  required: ["groups"],
  additionalProperties: false,
  properties: {
    groups: {
      type: "array",
      minItems: 1,
      items: {
        type: "object",
        required: ["name", "rules"],
        additionalProperties: false,
        properties: {
          name: { type: "string" },
          rules: {
            type: "array",
            minItems: 1,
            items: {
              type: "object",
              required: ["alert", "expr", "labels", "annotations"],
              additionalProperties: false,
              properties: {
                alert: { type: "string", pattern: "^[A-Za-z][A-Za-z0-9]*$" },
                expr: { type: "string", minLength: 1 },
                for: { type: "string", pattern: DURATION },
                labels: {
                  type: "object",
                  required: ["severity"],
                  properties: { severity: { enum: ["critical", "warning"] } },
                },
                annotations: { type: "object", required: ["summary", "description"] },
              },
            },
          },
        },
      },
    },
  },
};

interface Dashboard {
  readonly panels: ReadonlyArray<{
    readonly id: number;
    readonly targets: ReadonlyArray<{ readonly expr: string }>;
  }>;
}
interface Rules {
  readonly groups: ReadonlyArray<{
    readonly rules: ReadonlyArray<{ readonly alert: string; readonly expr: string }>;
  }>;
}

/** The livecount metric families a PromQL expression reads (histogram series map to their family). */
function metricsIn(expr: string): string[] {
  return [...expr.matchAll(/\blivecount_[a-z_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, ""));
}

describeWithServers("observability - dashboard and alerts against a real deployment", () => {
  let cluster: TestCluster;
  /** Every metric family a gateway or a counter node lists in /metrics. */
  let exposed: Set<string>;

  beforeAll(async () => {
    cluster = await TestCluster.start({ counters: 1, gateways: 1 });
    const texts = await Promise.all([...cluster.counters, ...cluster.gateways].map((p) => p.metricsText()));
    exposed = new Set(texts.flatMap((t) => [...t.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!)));
  }, 60_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  test("observability - the dashboard loads as a Grafana dashboard and every metric it queries exists in /metrics", () => {
    const dashboard = JSON.parse(
      readFileSync(join(ROOT, "infra/grafana/livecount.json"), "utf8"),
    ) as Dashboard;
    expect(validate(DASHBOARD_SCHEMA, dashboard, DASHBOARD_SCHEMA)).toEqual([]);
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const queried = new Set(dashboard.panels.flatMap((p) => p.targets.flatMap((t) => metricsIn(t.expr))));
    // What the issue asks operators to see, at least.
    for (const name of [
      "livecount_counter_replication_lag_seconds",
      "livecount_counter_dc_up",
      "livecount_counter_partitions_owned",
      "livecount_counter_partitions_bootstrapped",
      "livecount_gateway_frames_dropped_total",
      "livecount_gateway_upgrades_refused_total",
    ])
      expect(queried).toContain(name);
    expect([...queried].filter((name) => !exposed.has(name))).toEqual([]);
  });

  test("observability - the alert rules load as Prometheus rule groups, are wired into prometheus.yml, and query metrics that exist", () => {
    const rules = load(readFileSync(join(ROOT, "infra/prometheus/alerts.yml"), "utf8")) as Rules;
    expect(validate(RULES_SCHEMA, rules, RULES_SCHEMA)).toEqual([]);
    const alerts = rules.groups.flatMap((g) => g.rules.map((r) => r.alert));
    for (const alert of [
      "LivecountDcDown",
      "LivecountReplicationLagHigh",
      "LivecountCounterNodeWithoutPartitions",
      "LivecountFlushFailures",
      "LivecountBootstrapStuck",
      "LivecountSlowConsumers",
      "LivecountNatsSilent",
      "LivecountNatsServerStuck",
      "LivecountCounterCutOffBus",
    ])
      expect(alerts).toContain(alert);
    const queried = new Set(rules.groups.flatMap((g) => g.rules.flatMap((r) => metricsIn(r.expr))));
    expect([...queried].filter((name) => !exposed.has(name))).toEqual([]);
    const config = load(readFileSync(join(ROOT, "infra/prometheus/prometheus.yml"), "utf8")) as {
      rule_files?: string[];
    };
    expect(config.rule_files).toContain("alerts.yml");
  });
});
