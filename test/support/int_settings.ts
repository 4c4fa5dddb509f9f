/**
 * An integer setting held at its bounds: its default, its least and most taken, one past each
 * refused with the error that names the variable (readInt, packages/runtime), and a fraction refused.
 */
import { ConfigError } from "@livecount/runtime";
import { expect } from "vitest";

/** Variable, the config field it sets, its default, its least, its most (none: unbounded). */
export type IntSetting<F extends string> = readonly [
  variable: string,
  field: F,
  fallback: number,
  min: number,
  max: number | undefined,
];

export function expectIntBounds<F extends string>(
  readConfig: (env: Record<string, string>) => Record<F, unknown>,
  [variable, field, fallback, min, max]: IntSetting<F>,
): void {
  const read = (value: number): unknown => readConfig({ [variable]: String(value) })[field];
  expect(readConfig({})[field]).toBe(fallback);
  expect(read(min)).toBe(min);
  expect(() => read(min - 1)).toThrow(new ConfigError(`${variable} must be >= ${min}, got ${min - 1}`));
  if (max !== undefined) {
    expect(read(max)).toBe(max);
    expect(() => read(max + 1)).toThrow(new ConfigError(`${variable} must be <= ${max}, got ${max + 1}`));
  }
  expect(() => readConfig({ [variable]: "1.5" })).toThrow(`${variable} must be an integer`);
}
