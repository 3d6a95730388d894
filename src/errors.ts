/**
 * Every error this service reports over HTTP, as a stable machine-readable code.
 * 4xx codes mean "do not retry as is" to a human; Stripe retries any non-2xx anyway.
 */
export type ErrorCode =
  | "signature_missing" // 400: no signature header (Stripe-Signature; webhook-id, -timestamp, -signature)
  | "signature_malformed" // 400: a signature header the provider cannot parse (Stripe: not one integer t= and a v1=)
  | "signature_mismatch" // 400: no v1 signature matches any secret of the endpoint
  | "timestamp_out_of_tolerance" // 400: t= older or further in the future than the tolerance
  | "invalid_body" // 400: body is not UTF-8
  | "invalid_event" // 400: signed body is not an event of the endpoint's provider
  | "payload_too_large" // 413
  | "unknown_endpoint" // 404
  | "not_found" // 404
  | "method_not_allowed" // 405
  | "database_unavailable" // 503: transient, retry
  | "overloaded" // 503: every database slot busy past the queue timeout; nothing was touched
  | "processing_failed"; // 500: the transaction rolled back, retry

const STATUS: Record<ErrorCode, number> = {
  signature_missing: 400,
  signature_malformed: 400,
  signature_mismatch: 400,
  timestamp_out_of_tolerance: 400,
  invalid_body: 400,
  invalid_event: 400,
  payload_too_large: 413,
  unknown_endpoint: 404,
  not_found: 404,
  method_not_allowed: 405,
  database_unavailable: 503,
  overloaded: 503,
  processing_failed: 500,
};

/** An expected failure with a code and an operator-readable message (no secrets, no payload). */
export class AppError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = "AppError";
    this.code = code;
  }
  /** HTTP status for this code. */
  get status(): number {
    return STATUS[this.code];
  }
}

/**
 * Turns an AppError into `{ error, message }` JSON with its status. The body is whitelisted:
 * nothing else from the error object reaches the client. Anything that is not an AppError must be
 * mapped by the caller first (a 500 says nothing internal).
 */
export function errorResponse(err: AppError, headers: Record<string, string> = {}): Response {
  return Response.json({ error: err.code, message: err.message }, { status: err.status, headers });
}

/**
 * A handler failure that no retry can fix (e.g. a payload missing a required field). The handler's
 * transaction rolls back; then the receiver (every mode) records the event as needs-review and answers
 * 200 `needs_review` rather than a 5xx the provider would retry in vain, and the worker parks the row
 * at once instead of burning attempts.
 */
export class PermanentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PermanentError";
  }
}

/**
 * Error class, SQLSTATE and a short message, for `last_error` and logs; never a payload (handler
 * messages name fields, not values). At most 300 characters.
 */
export function describeError(err: unknown): string {
  const e = err as { name?: unknown; code?: unknown; message?: unknown } | null;
  const name = typeof e?.name === "string" ? e.name : "Error";
  const code = typeof e?.code === "string" ? ` ${e.code}` : "";
  const message = typeof e?.message === "string" ? e.message : String(err);
  return `${name}${code}: ${message}`.slice(0, 300);
}
