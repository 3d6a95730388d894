import Stripe from "stripe";
import { AppError, PermanentError } from "../errors.ts";
import { isObject, text } from "./json-event.ts";
import { jsonbCopy } from "./jsonb-text.ts";
import { checkTimestamp, type Subject, type VerifiedEvent, type VerifyInput, type WebhookProvider } from "./provider.ts";

/** Stripe retries a webhook delivery for up to 3 days after the event (Stripe docs, "Retry behavior"), in ms. */
export const STRIPE_RETRY_HORIZON_MS = 3 * 86_400_000;
/** Stripe keeps events for 30 days, so the Events API lists (and backfill re-reads) that far back (API reference, "List all events"), in ms. */
export const STRIPE_EVENTS_KEPT_MS = 30 * 86_400_000;

// Stripe's webhook helpers need no API key; a client without one only signs and verifies.
const stripe = new Stripe("sk_unused_for_webhook_verification");
const subtleCrypto = cachingKeys(Stripe.createSubtleCryptoProvider());

/** The key-less stripe-node client and the caching SubtleCrypto provider the Stripe verifiers share (stripe-thin.ts). */
export const stripeVerification: { readonly client: Stripe; readonly crypto: ReturnType<typeof Stripe.createSubtleCryptoProvider> } = {
  client: stripe,
  crypto: subtleCrypto,
};

/**
 * Stripe's SubtleCrypto provider with the imported HMAC key cached per secret: `importKey` cost about
 * a third of each verification (Bun 1.4: ~28 µs of ~88 µs CPU). Same contract as the provider it wraps
 * (`computeHMACSignatureAsync(payload, secret)` → lowercase hex of HMAC-SHA256 over the UTF-8 payload).
 */
function cachingKeys<T extends object>(provider: T): T {
  const keys = new Map<string, Promise<CryptoKey>>();
  const encoder = new TextEncoder();
  const hex = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));
  return Object.assign(Object.create(provider) as T, {
    async computeHMACSignatureAsync(payload: string, secret: string): Promise<string> {
      let key = keys.get(secret);
      if (!key) {
        key = crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
        keys.set(secret, key);
      }
      const signature = new Uint8Array(await crypto.subtle.sign("HMAC", await key, encoder.encode(payload)));
      let out = "";
      for (const byte of signature) out += hex[byte];
      return out;
    },
  });
}

interface SignatureHeader {
  timestamp: number;
  signatures: string[];
}

/**
 * Parses `Stripe-Signature: t=<unix s>,v1=<hex>[,v1=<hex>…][,v0=…]` (Stripe docs, "Verify webhook
 * signatures manually", step 1). Exactly one integer `t` and at least one `v1` are required.
 * @throws AppError `signature_missing` | `signature_malformed`
 */
export function parseStripeSignature(header: string | null): SignatureHeader {
  if (header === null || header.trim() === "") throw new AppError("signature_missing", "Missing Stripe-Signature header");
  const timestamps: string[] = [];
  const signatures: string[] = [];
  for (const part of header.split(",")) {
    // No trimming: Stripe's own parser (and Stripe's sender) uses no spaces, so "t=1, v1=…" is malformed.
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    const key = part.slice(0, eq);
    const value = part.slice(eq + 1);
    if (key === "t") timestamps.push(value);
    if (key === "v1" && value !== "") signatures.push(value);
  }
  const [t] = timestamps;
  if (timestamps.length !== 1 || t === undefined || !/^\d{1,12}$/.test(t)) {
    throw new AppError(
      "signature_malformed",
      "Cannot parse Stripe-Signature header: expected exactly one t= value, a Unix time in seconds (at most 12 digits; a time in milliseconds is refused)",
    );
  }
  if (signatures.length === 0) {
    throw new AppError("signature_malformed", "Cannot parse Stripe-Signature header: no v1 signature");
  }
  return { timestamp: Number(t), signatures };
}

/**
 * Our rules for a `Stripe-Signature` header before any HMAC is computed, shared by classic and thin
 * endpoints: the header parses ({@link parseStripeSignature}) and its timestamp is within
 * ±`toleranceSec` of `nowMs` ({@link checkTimestamp}; stripe-node's check only rejects old timestamps,
 * and its thin-event parser turns a tolerance of 0 into 300 s). Returns the header for stripe-node.
 * @throws AppError `signature_missing` | `signature_malformed` | `timestamp_out_of_tolerance`
 */
export function checkStripeTimestamp(input: Pick<VerifyInput, "headers" | "toleranceSec" | "nowMs">): string {
  checkTimestamp("Stripe", parseStripeSignature(input.headers.get("stripe-signature")).timestamp, input);
  return input.headers.get("stripe-signature") ?? "";
}

/**
 * Verifies a Stripe webhook and returns the event (Stripe docs, "Check the webhook signatures").
 * Order: header format; timestamp within ±`toleranceSec` of `nowMs` (Stripe's own check only rejects
 * old timestamps, so a future one is rejected here); HMAC-SHA256 over the exact body with each secret
 * through `stripe.webhooks.constructEventAsync` and the SubtleCrypto provider, accepting any match;
 * then the shape of a Stripe event (`object: "event"`, string `id` and `type`, object `data.object`).
 * @throws AppError `invalid_event` (empty body) | `signature_missing` | `signature_malformed` |
 *   `timestamp_out_of_tolerance` | `signature_mismatch` | `invalid_event`
 */
export async function verifyStripeEvent(input: VerifyInput): Promise<VerifiedEvent> {
  if (input.body === "") throw new AppError("invalid_event", "Webhook body is empty: expected a Stripe event");
  const header = checkStripeTimestamp(input);
  let event: unknown;
  for (const secret of input.secrets) {
    try {
      event = await stripe.webhooks.constructEventAsync(input.body, header, secret, input.toleranceSec, subtleCrypto, input.nowMs);
      break;
    } catch (err) {
      if (err instanceof Stripe.errors.StripeSignatureVerificationError) continue;
      // Signature matched but the body is not JSON (or is a thin v2 notification).
      throw new AppError("invalid_event", "Signed body is not a Stripe event: it is not a JSON event object");
    }
  }
  if (event === undefined) throw new AppError("signature_mismatch", "Cannot verify Stripe signature: no v1 signature matches");
  return toVerifiedEvent(event, input.body);
}

/**
 * Checks the shape of a Stripe event and builds the VerifiedEvent. When the body holds characters
 * jsonb refuses, the event is read from the storable copy instead (jsonb-text.ts), so business code
 * sees exactly what the inbox stores; `body` stays the exact bytes.
 */
function toVerifiedEvent(event: unknown, body: string): VerifiedEvent {
  const checked = checkEvent(event);
  const copy = jsonbCopy(body);
  const createdAt = createdOf(checked.payload);
  const scope = accountAndMode(checked.payload, "account");
  if (!copy) return { ...checked, subject: stripeSubject(checked.payload), body, createdAt, ...scope };
  // Only string contents changed: the copy has the same shape (the id pattern allows no escape).
  const clean = checkEvent(JSON.parse(copy.json));
  return {
    ...clean,
    subject: stripeSubject(clean.payload),
    body,
    createdAt,
    ...scope,
    sanitized: { ...copy, typeChanged: clean.type !== checked.type },
  };
}

/**
 * The account and mode of a Stripe event or thin notification (`field`: `account` for classic events,
 * `context` for thin notifications; Stripe docs "Connect webhooks"): the account id, `""` when absent
 * or null (the platform's own), and `livemode` when it is a boolean.
 * @throws AppError `invalid_event` when the field is neither absent, null nor a string of 1–255 characters.
 */
export function accountAndMode(payload: Record<string, unknown>, field: "account" | "context"): { account: string; livemode?: boolean } {
  const raw = payload[field];
  if (raw !== undefined && raw !== null && (typeof raw !== "string" || raw.length > 255 || /[\s\u0000-\u001f]/.test(raw)))
    throw new AppError("invalid_event", `Signed body is not a Stripe event: ${field} must be an account id (acct_…) or absent`);
  const livemode = payload.livemode;
  return { account: typeof raw === "string" ? raw : "", ...(typeof livemode === "boolean" ? { livemode } : {}) };
}

/** The event's `created` (Unix seconds, Stripe API reference "The Event object") as a Date; undefined when absent or not a time. */
function createdOf(payload: Record<string, unknown>): Date | undefined {
  const created = payload.created;
  return typeof created === "number" && Number.isFinite(created) && created > 0 ? new Date(created * 1000) : undefined;
}

function checkEvent(event: unknown): { id: string; type: string; payload: Record<string, unknown> } {
  const e = isObject(event) ? event : {};
  const ok =
    e.object === "event" &&
    typeof e.id === "string" &&
    /^evt_[A-Za-z0-9_]{1,250}$/.test(e.id) &&
    text(e.type, 200) !== undefined &&
    isObject(e.data) &&
    isObject(e.data.object);
  if (!ok) {
    throw new AppError("invalid_event", 'Signed body is not a Stripe event: expected object "event" with id evt_…, type and data.object');
  }
  return { id: e.id as string, type: e.type as string, payload: e };
}

/**
 * The subject of a Stripe event (Stripe API reference, "The Event object"): `data.object`, keyed by
 * the invoice it links to (`invoice`, an id or an expanded invoice, as on an invoice payment or an
 * older API version's charge), else by its own `id`. Billing handlers lock the invoice, so events of
 * one invoice (`invoice.paid` on `in_…`, `invoice_payment.paid` on `inpay_…`) share one key and every
 * batch takes that lock in the same order. An object without a string id has no key.
 * @throws PermanentError when `data.object` is missing or not an object.
 */
export function stripeSubject(payload: Record<string, unknown>): Subject {
  const fields = (payload.data as { object?: unknown } | null | undefined)?.object;
  if (!isObject(fields)) throw new PermanentError("Cannot read Stripe event: it has no data.object");
  const invoice = typeof fields.invoice === "object" && fields.invoice !== null ? (fields.invoice as { id?: unknown }).id : fields.invoice;
  const key = [invoice, fields.id].find((k): k is string => typeof k === "string" && k !== "");
  return { object: fields, key };
}

/**
 * An event read from Stripe's Events API (`stripe.events.list`) as the inbox records it: the same id,
 * type, payload and subject a webhook delivery of that event gives, with `source: "api"`. There is no
 * signed body: it is trusted because it came from Stripe over TLS with our key. `body` is the event
 * as the API returned it, serialized with JSON.stringify (a webhook body is the same object); the
 * inbox stores it as the payload and keeps it in `raw_body` only when jsonb needs a sanitized copy,
 * exactly as for a delivery (jsonb-text.ts).
 * @throws AppError `invalid_event` when the object is not a Stripe event (object "event", id evt_…,
 *   type, data.object).
 */
export function stripeApiEvent(event: unknown): VerifiedEvent {
  return { ...toVerifiedEvent(event, JSON.stringify(event)), source: "api" };
}

/** The Stripe provider: inbox `provider = 'stripe'`, verified by {@link verifyStripeEvent}, read by {@link stripeSubject}. */
/**
 * The Stripe provider: inbox `provider = 'stripe'`. Its resend window is the 30 days Stripe keeps events
 * (retries end after 3; event backfill and the Dashboard's resend read the 30 days).
 */
export const stripeProvider: WebhookProvider = {
  name: "stripe",
  resendWindowMs: Math.max(STRIPE_RETRY_HORIZON_MS, STRIPE_EVENTS_KEPT_MS),
  verify: verifyStripeEvent,
  subject: stripeSubject,
};

/**
 * Builds a `Stripe-Signature` header for `body` as Stripe would send it (`t=…,v1=…`), via Stripe's
 * `generateTestHeaderStringAsync`. For the delivery tool and tests. `timestampSec` is unix seconds.
 */
export function signStripePayload(body: string, secret: string, timestampSec: number): Promise<string> {
  return stripe.webhooks.generateTestHeaderStringAsync({ payload: body, secret, timestamp: timestampSec, cryptoProvider: subtleCrypto });
}
