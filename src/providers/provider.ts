import type { JsonbCopy } from "./jsonb-text.ts";

/**
 * A provider event that passed signature verification. Only this type reaches business code.
 * `payload` is the whole event object as the provider sent it (parsed once from the verified bytes);
 * `body` is those exact bytes as text, stored so the inbox keeps what was signed.
 */
export interface VerifiedEvent {
  /** Provider event id, e.g. `evt_1SkB…` (the inbox's idempotency key with provider and endpoint). */
  id: string;
  /** Event type, e.g. `invoice.paid`. */
  type: string;
  /** The event object. */
  payload: Record<string, unknown>;
  /** The verified request body, exactly as received. */
  body: string;
  /**
   * Present when `body` holds what PostgreSQL's jsonb refuses (a `\u0000`, a lone surrogate escape):
   * the copy stored as the inbox payload, which `payload`, `type` and `id` were read from; the inbox
   * then keeps `body` in `raw_body` as well. See jsonb-text.ts.
   */
  sanitized?: JsonbCopy & {
    /** True when the event type itself was changed: no handler can be chosen for it. */
    typeChanged: boolean;
  };
}

/** What a provider's verifier gets: the raw body (already size-limited and UTF-8 checked) and the headers. */
export interface VerifyInput {
  body: string;
  headers: Headers;
  /** Every currently valid secret of the endpoint (more than one during a rotation). */
  secrets: readonly string[];
  /** Maximum allowed clock difference, seconds, in either direction. Always > 0. */
  toleranceSec: number;
  /** Current time, milliseconds since the epoch (injectable for tests). */
  nowMs: number;
}

/**
 * One webhook provider (Stripe today; GitHub, Standard Webhooks, Shopify later): its name, used as
 * the inbox's `provider` column, and its verifier. `verify` throws AppError with a 4xx code for
 * anything that must not be recorded; it never touches the database.
 */
export interface WebhookProvider {
  readonly name: string;
  verify(input: VerifyInput): Promise<VerifiedEvent>;
}
