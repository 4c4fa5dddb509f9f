import { ConfigError } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { readCounterConfig } from "../src/counter_config.js";
import { MIN_SECRET_LENGTH, readWebhookConfig } from "../src/webhook_config.js";

const URL_ENV = { LIVECOUNT_WEBHOOK_URL: "https://hooks.example.com/livecount?token=t" };
const SECRET = "x".repeat(MIN_SECRET_LENGTH);

describe("counter - webhook settings", () => {
  test("counter - without a webhook URL a node sends no webhooks, whatever else is set", () => {
    expect(readWebhookConfig({})).toBeUndefined();
    expect(
      readWebhookConfig({ LIVECOUNT_WEBHOOK_SECRET: "short", LIVECOUNT_WEBHOOK_THRESHOLDS: "x" }),
    ).toBeUndefined();
    expect(readCounterConfig({}).webhook).toBeUndefined();
  });

  test("counter - a webhook URL comes with every default", () => {
    expect(readCounterConfig({ ...URL_ENV, LIVECOUNT_WEBHOOK_SECRET: SECRET }).webhook).toEqual({
      url: "https://hooks.example.com/livecount?token=t",
      secret: SECRET,
      thresholds: [],
      hysteresisPct: 10,
      timeoutMs: 5_000,
      maxAgeMs: 3_600_000,
      maxQueued: 10_000,
      concurrency: 8,
      retryMs: 1_000,
      retryMaxMs: 60_000,
    });
  });

  test("counter - a webhook URL without a secret refuses to start, naming the missing setting", () => {
    expect(() => readCounterConfig(URL_ENV)).toThrow(ConfigError);
    expect(() => readCounterConfig(URL_ENV)).toThrow(/LIVECOUNT_WEBHOOK_SECRET/);
  });

  test("counter - a secret is accepted from 32 characters and refused at 31", () => {
    const at = (length: number) => () =>
      readWebhookConfig({ ...URL_ENV, LIVECOUNT_WEBHOOK_SECRET: "k".repeat(length) });
    expect(at(MIN_SECRET_LENGTH)()?.secret).toHaveLength(32);
    expect(at(MIN_SECRET_LENGTH - 1)).toThrow(/at least 32 characters/);
  });

  test("counter - thresholds must be ascending positive integers", () => {
    const read = (thresholds: string) => () =>
      readWebhookConfig({
        ...URL_ENV,
        LIVECOUNT_WEBHOOK_SECRET: SECRET,
        LIVECOUNT_WEBHOOK_THRESHOLDS: thresholds,
      });
    expect(read("100, 1000")()?.thresholds).toEqual([100, 1000]);
    expect(read("1")()?.thresholds).toEqual([1]);
    for (const bad of ["0", "-5", "1.5", "ten", "100,100", "1000,100", "9007199254740993"])
      expect(read(bad), bad).toThrow(ConfigError);
  });

  test("counter - a URL that is not http or https is refused", () => {
    for (const url of ["ftp://example.com/", "not a url", "file:///etc/passwd"])
      expect(() =>
        readWebhookConfig({ LIVECOUNT_WEBHOOK_URL: url, LIVECOUNT_WEBHOOK_SECRET: SECRET }),
      ).toThrow(/http or https URL/);
  });

  test("counter - each webhook limit is refused outside its range", () => {
    const base = { ...URL_ENV, LIVECOUNT_WEBHOOK_SECRET: SECRET };
    const cases: Array<[string, string, string]> = [
      ["LIVECOUNT_WEBHOOK_TIMEOUT_MS", "100", "99"],
      ["LIVECOUNT_WEBHOOK_MAX_AGE_S", "1", "0"],
      ["LIVECOUNT_WEBHOOK_MAX_QUEUED", "1", "0"],
      ["LIVECOUNT_WEBHOOK_CONCURRENCY", "256", "257"],
      ["LIVECOUNT_WEBHOOK_HYSTERESIS_PCT", "50", "51"],
      ["LIVECOUNT_WEBHOOK_RETRY_MS", "10", "9"],
    ];
    for (const [name, ok, bad] of cases) {
      expect(readWebhookConfig({ ...base, [name]: ok }), name).toBeDefined();
      expect(() => readWebhookConfig({ ...base, [name]: bad }), name).toThrow(name);
    }
    // The cap of a retry's wait is never below its first wait.
    expect(() =>
      readWebhookConfig({
        ...base,
        LIVECOUNT_WEBHOOK_RETRY_MS: "500",
        LIVECOUNT_WEBHOOK_RETRY_MAX_MS: "499",
      }),
    ).toThrow(/LIVECOUNT_WEBHOOK_RETRY_MAX_MS/);
  });
});
