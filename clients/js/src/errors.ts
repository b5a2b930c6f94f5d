// The client's errors: the API's error answers and the client's own
// (no answer from the daemon, a revoked stream), one class a caller tests
// with instanceof and switches on by code.

import type { ClientErrorCode, ErrorCode } from "./types.js";

/** Every code a SyncdError carries: the API's and the client's own. */
export type SyncdErrorCode = ErrorCode | ClientErrorCode;

/**
 * An error answer of the local API, or the client's own failure to get
 * one. `code` is stable: switch on it (the API's codes are `errorCodes`,
 * the client's `clientErrorCodes`; a daemon newer than this client may
 * send a code neither lists). `status` is the HTTP status, 0 when there
 * was no answer.
 */
export class SyncdError extends Error {
  readonly status: number;
  readonly code: SyncdErrorCode;
  /** The refused write of a batch; -1 otherwise. */
  readonly index: number;
  constructor(status: number, code: SyncdErrorCode, message: string, opts: { index?: number; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "SyncdError";
    this.status = status;
    this.code = code;
    this.index = opts.index ?? -1;
  }
}

/** The SyncdError of an error answer's body. */
export function toError(status: number, text: string): SyncdError {
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string; index?: number } };
    if (body.error?.code) {
      return new SyncdError(status, body.error.code as SyncdErrorCode, body.error.message ?? "", { index: body.error.index ?? -1 });
    }
  } catch {
    // not JSON: not the local API
  }
  return new SyncdError(status, "unexpected_response", `syncd: an answer that is not the local API's (HTTP ${status}): ${text.trim().slice(0, 200)}`);
}

/**
 * Whether a fetch failure happened before the request was sent: the
 * connection was refused or the socket is not there. Such a request can
 * be sent again whatever it is; after any other failure (a reset, a
 * timeout) only a request that carries its idempotency key, or a read,
 * can.
 */
export function neverSent(err: unknown): boolean {
  const code = errnoCode(err);
  return code === "ECONNREFUSED" || code === "ENOENT" || code === "EADDRNOTAVAIL";
}

function errnoCode(err: unknown): string | undefined {
  // undici's fetch throws TypeError("fetch failed") with the system error
  // as cause (sometimes an AggregateError of one per address); Node's http
  // (unixFetch) throws the system error itself.
  for (let e: unknown = err, depth = 0; e && depth < 4; depth++) {
    const o = e as { code?: unknown; cause?: unknown; errors?: unknown[] };
    if (typeof o.code === "string" && o.code !== "UND_ERR_SOCKET") return o.code;
    if (Array.isArray(o.errors) && o.errors.length > 0) e = o.errors[0];
    else e = o.cause;
  }
  return undefined;
}

/** The SyncdError for a request that got no answer. */
export function unreachable(baseURL: string, attempts: number, err: unknown): SyncdError {
  const why = errnoCode(err) ?? (err instanceof Error ? err.message : String(err));
  const tries = attempts === 1 ? "1 attempt" : `${attempts} attempts`;
  return new SyncdError(0, "daemon_unreachable", `syncd: no answer from the daemon at ${baseURL} (${why}, ${tries}): is it running?`, { cause: err });
}
