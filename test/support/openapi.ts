/**
 * Checks real HTTP exchanges against docs/openapi.json: the operation for the method and path, the
 * documented response for the status, its required headers, its content type and its body schema
 * (validated with json_schema.ts). Records which (operation, status) pairs were seen, so a test can
 * insist that every documented answer was produced by the running server at least once.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { resolvePointer, validate, type Schema } from "./json_schema.js";

const DOC_PATH = fileURLToPath(new URL("../../docs/openapi.json", import.meta.url));
const METHODS = ["get", "put", "post", "delete", "patch"] as const;

type Json = Record<string, unknown>;

export interface Exchange {
  readonly method: string;
  /** The raw (percent-encoded) path, without the query. */
  readonly path: string;
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

interface Operation {
  readonly id: string;
  readonly template: string;
  readonly method: string;
  readonly regex: RegExp;
  readonly spec: Json;
}

export class OpenApiDoc {
  readonly doc: Json;
  readonly #operations: Operation[] = [];
  /** `${operationId} ${status}`, and `${component response name}` for route-less answers. */
  readonly seen = new Set<string>();

  constructor(doc: Json = JSON.parse(readFileSync(DOC_PATH, "utf8")) as Json) {
    this.doc = doc;
    for (const [template, item] of Object.entries(doc.paths as Record<string, Json>)) {
      const regex = new RegExp(
        `^${template
          .split("/")
          .map((seg) => (/^\{.+\}$/.test(seg) ? "[^/]+" : seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
          .join("/")}$`,
      );
      for (const method of METHODS) {
        const spec = item[method] as Json | undefined;
        if (spec !== undefined)
          this.#operations.push({ id: String(spec.operationId), template, method, regex, spec });
      }
    }
  }

  /** Every documented `${operationId} ${status}`. */
  get documented(): string[] {
    return this.#operations.flatMap((op) =>
      Object.keys(op.spec.responses as Json).map((s) => `${op.id} ${s}`),
    );
  }

  operation(method: string, path: string): Operation | undefined {
    return this.#operations.find((op) => op.method === method.toLowerCase() && op.regex.test(path));
  }

  /** The request body schema of an operation (for checking that what a test sends is documented). */
  requestSchema(method: string, path: string): Schema {
    const op = this.operation(method, path);
    const body = op?.spec.requestBody as Json | undefined;
    const content = body?.content as Record<string, { schema: Schema }> | undefined;
    if (content?.["application/json"] === undefined)
      throw new Error(`no JSON request body for ${method} ${path}`);
    return content["application/json"].schema;
  }

  /** Violations of `schema` by `value`, against this document's components. */
  violations(schema: Schema, value: unknown): string[] {
    return validate(schema, value, this.doc);
  }

  /**
   * Checks an exchange against its operation (or, for a path or method no operation has, against
   * the component response `fallback`, e.g. "NotFound"). Throws with every violation found.
   */
  check(exchange: Exchange, fallback?: string): void {
    const op = this.operation(exchange.method, exchange.path);
    let response: Json;
    let label: string;
    if (op !== undefined) {
      const responses = op.spec.responses as Record<string, Json>;
      const found = responses[String(exchange.status)];
      if (found === undefined)
        throw new Error(
          `${op.id} (${exchange.method} ${exchange.path}): status ${exchange.status} is not documented\n${exchange.text}`,
        );
      response = found;
      label = `${op.id} ${exchange.status}`;
    } else {
      if (fallback === undefined)
        throw new Error(`no documented operation for ${exchange.method} ${exchange.path}`);
      response = { $ref: `#/components/responses/${fallback}` };
      label = fallback;
    }
    const errors = this.#checkResponse(this.#deref(response), exchange);
    if (errors.length > 0)
      throw new Error(
        `${label} (${exchange.method} ${exchange.path}) breaks docs/openapi.json:\n  ${errors.join("\n  ")}\nbody: ${exchange.text}`,
      );
    this.seen.add(label);
  }

  #deref(node: Json): Json {
    let current = node;
    while (typeof current.$ref === "string") current = resolvePointer(this.doc, current.$ref) as Json;
    return current;
  }

  #checkResponse(response: Json, exchange: Exchange): string[] {
    const errors: string[] = [];
    for (const [name, raw] of Object.entries((response.headers ?? {}) as Record<string, Json>)) {
      const header = this.#deref(raw);
      const value = exchange.headers.get(name);
      if (value === null) {
        if (header.required === true) errors.push(`missing header ${name}`);
        continue;
      }
      for (const e of validate(header.schema as Schema, value, this.doc, `header ${name}`)) errors.push(e);
    }
    const content = response.content as Record<string, { schema: Schema }> | undefined;
    if (content === undefined) {
      if (exchange.text !== "") errors.push("a body where none is documented");
      return errors;
    }
    const type = (exchange.headers.get("content-type") ?? "").split(";")[0]!.trim();
    const media = content[type];
    if (media === undefined)
      return [...errors, `content type ${type} is not one of ${Object.keys(content).join(", ")}`];
    let body: unknown = exchange.text;
    if (type === "application/json") {
      try {
        body = JSON.parse(exchange.text);
      } catch {
        return [...errors, "body is not JSON"];
      }
    }
    return [...errors, ...validate(media.schema, body, this.doc, "body")];
  }
}
