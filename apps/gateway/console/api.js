/*
 * The console's calls to the gateway's API (GET /v1/admin/... and the rest) with the admin key: an
 * answer that is not 2xx throws an HttpError with the API's error code; a refused key signs out.
 */
import { key, signOut } from "./session.js";

/** A read the gateway has not answered in this long fails (a hung gateway shows as one) (ms). */
const API_TIMEOUT_MS = 10_000;

class HttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(path, init = {}) {
  let res;
  try {
    res = await fetch(path, {
      ...init,
      headers: { authorization: `Bearer ${key()}`, ...(init.headers ?? {}) },
      signal: AbortSignal.timeout(API_TIMEOUT_MS),
    });
  } catch (err) {
    throw err.name === "TimeoutError"
      ? new Error(`the gateway did not answer within ${API_TIMEOUT_MS / 1000} s`)
      : err;
  }
  const body = await res.json().catch(() => ({}));
  if (res.status === 401) {
    signOut("The admin key was refused.");
    throw new HttpError(401, "unauthorized", "signed out");
  }
  if (!res.ok)
    throw new HttpError(res.status, body?.error?.code ?? "error", body?.error?.message ?? res.statusText);
  return body;
}
