/**
 * Reading configuration from the environment: typed, validated at startup, with the variable name
 * in every error so an operator sees at once what to fix.
 */
export type Env = Readonly<Record<string, string | undefined>>;

export class ConfigError extends Error {
  override name = "ConfigError";
}

function raw(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === "" ? undefined : v.trim();
}

export function readString(env: Env, name: string, fallback: string): string {
  return raw(env, name) ?? fallback;
}

export function readOptionalString(env: Env, name: string): string | undefined {
  return raw(env, name);
}

export function readInt(
  env: Env,
  name: string,
  fallback: number,
  range: { min?: number; max?: number } = {},
): number {
  const v = raw(env, name);
  if (v === undefined) return fallback;
  if (!/^-?\d+$/.test(v)) throw new ConfigError(`${name} must be an integer, got "${v}"`);
  const n = Number(v);
  if (range.min !== undefined && n < range.min)
    throw new ConfigError(`${name} must be >= ${range.min}, got ${n}`);
  if (range.max !== undefined && n > range.max)
    throw new ConfigError(`${name} must be <= ${range.max}, got ${n}`);
  return n;
}

const TRUE = new Set(["1", "true", "yes", "on"]);
const FALSE = new Set(["0", "false", "no", "off"]);

/** A switch: 1, true, yes or on; 0, false, no or off (any case). Anything else is an error. */
export function readFlag(env: Env, name: string, fallback: boolean): boolean {
  const v = raw(env, name);
  if (v === undefined) return fallback;
  if (TRUE.has(v.toLowerCase())) return true;
  if (FALSE.has(v.toLowerCase())) return false;
  throw new ConfigError(`${name} must be 1 or 0 (true/false, yes/no, on/off), got "${v}"`);
}

/** One of `choices`, exactly as listed. */
export function readChoice<T extends string>(env: Env, name: string, fallback: T, choices: readonly T[]): T {
  const v = raw(env, name);
  if (v === undefined) return fallback;
  if (!(choices as readonly string[]).includes(v))
    throw new ConfigError(`${name} must be one of ${choices.join(", ")}, got "${v}"`);
  return v as T;
}

/** Comma-separated list; empty items dropped. */
export function readList(env: Env, name: string): string[] {
  const v = raw(env, name);
  return v === undefined
    ? []
    : v
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s.length > 0);
}

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

/** A data center or node id: it becomes a bus subject token and a Redis field, so the alphabet is small. */
export function readToken(env: Env, name: string, fallback: string): string {
  const v = readString(env, name, fallback);
  if (!TOKEN.test(v)) throw new ConfigError(`${name} must be 1..64 of [A-Za-z0-9_-], got "${v}"`);
  return v;
}
