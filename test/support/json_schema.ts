/**
 * A small JSON Schema (2020-12) validator for the subset docs/openapi.json uses, so the OpenAPI
 * test needs no dependency. A keyword outside the subset throws: a schema is never half-checked.
 *
 * Supported: $ref (local "#/..." pointers), type (a name or a list; "integer" is a whole number),
 * enum, const, properties, required, additionalProperties (boolean or schema), propertyNames,
 * items, minItems, maxItems, minimum, maximum, minLength, maxLength, pattern (unicode regex),
 * anyOf, oneOf, allOf. Annotations (description, title, examples, format, default, ...) are
 * ignored.
 */
export type Schema = boolean | { readonly [keyword: string]: unknown };

const ANNOTATIONS = new Set([
  "description",
  "title",
  "examples",
  "example",
  "format",
  "default",
  "deprecated",
  "readOnly",
  "writeOnly",
  "$comment",
]);

const KEYWORDS = new Set([
  "$ref",
  "type",
  "enum",
  "const",
  "properties",
  "required",
  "additionalProperties",
  "propertyNames",
  "items",
  "minItems",
  "maxItems",
  "minimum",
  "maximum",
  "minLength",
  "maxLength",
  "pattern",
  "anyOf",
  "oneOf",
  "allOf",
]);

export class UnsupportedSchemaError extends Error {
  override name = "UnsupportedSchemaError";
}

function typeOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

function hasType(v: unknown, type: string): boolean {
  switch (type) {
    case "integer":
      return typeof v === "number" && Number.isInteger(v);
    case "number":
      return typeof v === "number" && Number.isFinite(v);
    case "object":
      return typeOf(v) === "object";
    default:
      return typeOf(v) === type;
  }
}

function deepEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Resolves a local JSON pointer such as "#/components/schemas/Entry" against `root`. */
export function resolvePointer(root: unknown, ref: string): unknown {
  if (!ref.startsWith("#/")) throw new UnsupportedSchemaError(`only local $ref are supported: ${ref}`);
  let node: unknown = root;
  for (const raw of ref.slice(2).split("/")) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof node !== "object" || node === null || !Object.hasOwn(node, key))
      throw new UnsupportedSchemaError(`$ref ${ref} does not resolve`);
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

/** Returns every violation of `schema` by `value` (empty when valid), each with its JSON path. */
export function validate(schema: Schema, value: unknown, root: unknown, path = "$"): string[] {
  if (schema === true) return [];
  if (schema === false) return [`${path}: no value is allowed here`];
  for (const keyword of Object.keys(schema)) {
    if (!KEYWORDS.has(keyword) && !ANNOTATIONS.has(keyword))
      throw new UnsupportedSchemaError(`unsupported keyword ${keyword} at ${path}`);
  }
  const s = schema as Record<string, unknown>;
  const errors: string[] = [];
  const sub = (child: unknown, v: unknown, p: string): string[] => validate(child as Schema, v, root, p);

  if (typeof s.$ref === "string") errors.push(...sub(resolvePointer(root, s.$ref), value, path));
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
    if (!types.some((t) => hasType(value, t))) {
      errors.push(`${path}: expected ${types.join(" or ")}, got ${typeOf(value)}`);
      return errors;
    }
  }
  if (Array.isArray(s.enum) && !s.enum.some((e) => deepEqual(e, value)))
    errors.push(`${path}: ${JSON.stringify(value)} is not one of ${JSON.stringify(s.enum)}`);
  if ("const" in s && !deepEqual(s.const, value))
    errors.push(`${path}: expected ${JSON.stringify(s.const)}, got ${JSON.stringify(value)}`);

  if (typeof value === "number") {
    if (typeof s.minimum === "number" && value < s.minimum) errors.push(`${path}: ${value} < ${s.minimum}`);
    if (typeof s.maximum === "number" && value > s.maximum) errors.push(`${path}: ${value} > ${s.maximum}`);
  }
  if (typeof value === "string") {
    const length = [...value].length;
    if (typeof s.minLength === "number" && length < s.minLength)
      errors.push(`${path}: shorter than ${s.minLength}`);
    if (typeof s.maxLength === "number" && length > s.maxLength)
      errors.push(`${path}: longer than ${s.maxLength}`);
    if (typeof s.pattern === "string" && !new RegExp(s.pattern, "u").test(value))
      errors.push(`${path}: ${JSON.stringify(value)} does not match ${s.pattern}`);
  }
  if (Array.isArray(value)) {
    if (typeof s.minItems === "number" && value.length < s.minItems)
      errors.push(`${path}: fewer than ${s.minItems} items`);
    if (typeof s.maxItems === "number" && value.length > s.maxItems)
      errors.push(`${path}: more than ${s.maxItems} items`);
    if (s.items !== undefined)
      value.forEach((item, i) => errors.push(...sub(s.items, item, `${path}[${i}]`)));
  }
  if (hasType(value, "object")) {
    const obj = value as Record<string, unknown>;
    const properties = (s.properties ?? {}) as Record<string, unknown>;
    for (const name of (s.required ?? []) as string[])
      if (!Object.hasOwn(obj, name)) errors.push(`${path}: missing required property ${name}`);
    for (const [name, v] of Object.entries(obj)) {
      const p = `${path}.${name}`;
      if (s.propertyNames !== undefined) errors.push(...sub(s.propertyNames, name, `${p} (name)`));
      if (Object.hasOwn(properties, name)) errors.push(...sub(properties[name], v, p));
      else if (s.additionalProperties !== undefined) errors.push(...sub(s.additionalProperties, v, p));
    }
  }
  if (Array.isArray(s.allOf)) for (const part of s.allOf) errors.push(...sub(part, value, path));
  if (Array.isArray(s.anyOf) && !s.anyOf.some((part) => sub(part, value, path).length === 0))
    errors.push(
      `${path}: matches none of anyOf (${s.anyOf.map((p) => sub(p, value, path).join("; ")).join(" | ")})`,
    );
  if (Array.isArray(s.oneOf)) {
    const matching = s.oneOf.filter((part) => sub(part, value, path).length === 0).length;
    if (matching !== 1) errors.push(`${path}: matches ${matching} of oneOf, want exactly 1`);
  }
  return errors;
}
