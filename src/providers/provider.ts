import { AppError } from "../errors.ts";
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
  /** What the event is about, read from `payload` by its provider's {@link WebhookProvider.subject}. */
  subject: Subject;
  /** The event's own creation time as its provider gives it (Stripe: `created`), stored as data (`event_created_at`), never part of the key; undefined: none given. */
  createdAt?: Date;
  /**
   * The Stripe account the event belongs to: a connected account's id (`acct_…`: a classic event's
   * `account`, a thin notification's `context`; Stripe docs "Connect webhooks") or `""` for the
   * platform's own events and for providers without accounts. Undefined is read as `""`.
   */
  account?: string;
  /** The event's `livemode` (Stripe: true for live mode, false for test mode); undefined when the provider has none. */
  livemode?: boolean;
  /** The verified request body, exactly as received (for an event read from Stripe's API: the event as the API returned it, serialized). */
  body: string;
  /**
   * Where the event came from, stored in the inbox's `source` column when this event inserts the row
   * (a later duplicate changes nothing): `webhook` (default, a signed delivery) or `api` (read from
   * the provider's API by event backfill, trusted because it came over TLS with our key).
   */
  source?: EventSource;
  /**
   * Present when `body` holds what PostgreSQL's jsonb refuses (a `\u0000`, a lone surrogate escape):
   * the copy stored as the inbox payload, which `payload`, `type` and `id` were read from; the inbox
   * then keeps `body` in `raw_body` as well. See jsonb-text.ts.
   */
  /**
   * The W3C `traceparent` of the span that recorded this delivery (src/telemetry.ts), stored on the
   * inbox row so a worker's span can link to it; undefined when tracing is off.
   */
  traceparent?: string;
  sanitized?: JsonbCopy & {
    /** True when the event type itself was changed: no handler can be chosen for it. */
    typeChanged: boolean;
  };
}

/** The inbox's `source` values (sql/0014_inbox_source.sql). */
export type EventSource = "webhook" | "api" | "reconcile";

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
 * The timestamp check of every scheme that signs one (Stripe, Paddle, Standard Webhooks): `signedAtSec`
 * (unix seconds) within ±`toleranceSec` of `nowMs`, both directions (stripe-node's own check only rejects
 * old ones). The message names the scheme (`Stripe`), never the tolerance or the skew: it is public.
 * @throws AppError `timestamp_out_of_tolerance`
 */
export function checkTimestamp(scheme: string, signedAtSec: number, input: Pick<VerifyInput, "toleranceSec" | "nowMs">): void {
  if (Math.abs(Math.floor(input.nowMs / 1000) - signedAtSec) > input.toleranceSec)
    throw new AppError("timestamp_out_of_tolerance", `Cannot verify ${scheme} signature: its timestamp is outside the accepted window`);
}

/**
 * What an event is about, as its provider's envelope says: the object handlers apply and the business
 * key the worker orders a batch's row locks by. Generic code reads events only through this.
 */
export interface Subject {
  /** The object handlers receive (Stripe: `data.object`; Standard Webhooks: `data`). */
  object: Record<string, unknown>;
  /**
   * The business key whose rows the event's handler locks, compared as a string: two batches that
   * lock in ascending key order cannot deadlock each other. Undefined when the envelope names none
   * (the worker then orders the row by its event id).
   */
  key: string | undefined;
}

/**
 * One webhook provider (Stripe, Standard Webhooks, GitHub, Shopify, Paddle Billing, Adyen): its name,
 * used as the inbox's `provider` column and the URL segment, its verifier and how to read its envelope.
 * Adding one is a file in src/providers/ and a line in registry.ts (docs/providers/README.md).
 */
export interface WebhookProvider {
  readonly name: string;
  /**
   * How long after an event's first delivery its sender may send the same event id again, ms: its
   * automatic retries, and any replay, resend or API read of it that the product would record (Stripe's
   * Events API, Paddle's replay, GitHub's redelivery). `inbox purge` keeps an event's inbox key at least
   * this long plus a margin (ops/purge.ts), so every such delivery meets the key and is a duplicate.
   * Each provider's value cites its source (docs/providers/, docs/operations.md "Retention").
   */
  readonly resendWindowMs: number;
  /**
   * The provider's default signature timestamp tolerance, seconds, when it differs from the
   * receiver's (`STRIPE_TOLERANCE_SEC`, 300); an endpoint's `WEBHOOK_TOLERANCE_SEC_<P>_<NAME>` overrides it.
   * Undefined for a scheme without a timestamp too (GitHub, Shopify, Adyen: then it is never read).
   */
  readonly toleranceSec?: number;
  /** What is wrong with one configured secret of this provider (e.g. Adyen's must be hex), or undefined; never echoes the secret. */
  secretProblem?(secret: string): string | undefined;
  /**
   * For a provider whose one delivery carries several events (Adyen's `notificationItems`): verifies
   * every one of them, in the order sent; one that fails refuses the whole delivery (the same errors as
   * {@link verify}). The receiver then records (and, in sync and hybrid mode, applies) them all in one
   * transaction. Absent: a delivery is one event, read by `verify`.
   */
  verifyAll?(input: VerifyInput): Promise<VerifiedEvent[]>;
  /**
   * The 2xx answer the sender requires once every event of a delivery is committed (Adyen: 200
   * `[accepted]`). Absent: 200 JSON `{ outcome, event_id }`.
   */
  accepted?(): Response;
  /**
   * Checks the signature over the exact body, the timestamp within ±`toleranceSec` (both directions),
   * and the envelope (subject included); never touches the database.
   * @throws AppError `signature_missing` | `signature_malformed` | `timestamp_out_of_tolerance` |
   *   `signature_mismatch` | `invalid_event` for anything that must not be recorded.
   */
  verify(input: VerifyInput): Promise<VerifiedEvent>;
  /**
   * The subject of a stored event `payload` (the whole event as `verify` returned it).
   * @throws PermanentError when the envelope has no subject (no retry can add one).
   */
  subject(payload: Record<string, unknown>): Subject;
}
