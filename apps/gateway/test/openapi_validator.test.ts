/**
 * The validator that openapi.test.ts checks every answer with (test/support/openapi.ts) refuses
 * what docs/openapi.json does not allow: without that, a passing check there would prove nothing.
 * It needs no gateway, only the document.
 */
import { describe, expect, test } from "vitest";
import { OpenApiDoc } from "../../../test/support/openapi.js";

describe("gateway - OpenAPI document", () => {
  const doc = new OpenApiDoc();

  test("openapi - the validator refuses what the document does not allow", () => {
    const totals = { $ref: "#/components/schemas/PageTotals" };
    const good = {
      page: "a",
      count: 1,
      viewers: 1,
      active: 1,
      connections: 1,
      counters: { likes: 2 },
      updated_at: 1,
    };
    expect(doc.violations(totals, good)).toEqual([]);
    expect(doc.violations(totals, { ...good, counters: { "@viewers": 1 } })).not.toEqual([]);
    expect(doc.violations(totals, { ...good, counters: { "@del:likes": 1 } })).not.toEqual([]);
    expect(doc.violations(totals, { ...good, extra: true })).not.toEqual([]);
    expect(doc.violations(totals, { ...good, viewers: -1 })).not.toEqual([]);
    expect(doc.violations(totals, { ...good, page: "a b" })).not.toEqual([]);
    const { updated_at: _, ...partial } = good;
    expect(doc.violations(totals, partial)).not.toEqual([]);
  });
});
