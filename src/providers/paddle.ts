import { AppError, PermanentError } from "../errors.ts";
import { anyHmacMatches, fromHex, hmacSha256, toHex } from "./hmac.ts";
import { isObject, isoDate, jsonEvent, text } from "./json-event.ts";
import { checkTimestamp, type Subject, type VerifiedEvent, type VerifyInput, type WebhookProvider } from "./provider.ts";

/**
 * Paddle Billing's default signature tolerance here, seconds, both directions: 60. Paddle's SDKs reject
 * a `ts` more than 5 s old (developer.paddle.com, "Verify webhook signatures", "Compare signatures"),
 * which turns a few seconds of clock skew into refused deliveries; Paddle signs each attempt afresh, so
 * a minute still keeps a captured delivery's replay window short. `WEBHOOK_TOLERANCE_SEC_PADDLE_<NAME>`
 * sets it per endpoint.
 */
export const PADDLE_TOLERANCE_SEC = 60;

/**
 * Verifies a Paddle Billing webhook (developer.paddle.com, "Verify webhook signatures"):
 * `Paddle-Signature: ts=<unix s>;h1=<hex>[;h1=<hex>…]` with exactly one integer `ts` within
 * ±`toleranceSec` of `nowMs`, and one `h1` (several may be sent while Paddle rotates the secret) equal
 * to the HMAC-SHA256 of `<ts>:<exact body>` with one of the endpoint's secret keys
 * (`pdl_ntfset_…`). The body must be an event `{ event_id, event_type, occurred_at, data: {…} }`: the
 * inbox id is `event_id` (the same on every retry), the type `event_type`, the creation time
 * `occurred_at`.
 * @throws AppError `signature_missing` | `signature_malformed` | `timestamp_out_of_tolerance` |
 *   `signature_mismatch` | `invalid_event`.
 */
export async function verifyPaddle(input: VerifyInput): Promise<VerifiedEvent> {
  const header = input.headers.get("paddle-signature");
  if (!header) throw new AppError("signature_missing", "Missing Paddle-Signature header");
  const timestamps: string[] = [];
  const signatures: Uint8Array[] = [];
  for (const part of header.split(";")) {
    const [key, value = ""] = part.split("=", 2);
    if (key === "ts") timestamps.push(value);
    if (key === "h1") {
      const bytes = /^[0-9a-f]{64}$/.test(value) ? fromHex(value) : undefined;
      if (!bytes) throw new AppError("signature_malformed", "Cannot parse Paddle-Signature: an h1 is not 64 lowercase hex digits");
      signatures.push(bytes);
    }
  }
  const [ts] = timestamps;
  if (timestamps.length !== 1 || ts === undefined || !/^\d{1,12}$/.test(ts))
    throw new AppError("signature_malformed", "Cannot parse Paddle-Signature: expected exactly one integer ts= value");
  if (signatures.length === 0) throw new AppError("signature_malformed", "Cannot parse Paddle-Signature: no h1 signature");
  checkTimestamp("Paddle", Number(ts), input);
  if (!(await anyHmacMatches(input.secrets, `${ts}:${input.body}`, signatures)))
    throw new AppError("signature_mismatch", "Cannot verify Paddle signature: no h1 signature matches");
  return jsonEvent(input.body, "a Paddle Billing event: a JSON object with event_id, event_type and a data object", (payload) => {
    const id = text(payload.event_id);
    const type = text(payload.event_type, 200);
    if (!id || !type || !isObject(payload.data)) return undefined;
    const occurredAt = isoDate(payload.occurred_at);
    return { id, type, subject: paddleSubject(payload), ...(occurredAt ? { createdAt: occurredAt } : {}) };
  });
}

/**
 * The subject of a Paddle event: `data` (the entity: a transaction, a subscription), keyed by
 * `data.id` (`txn_…`, `sub_…`) when it is a string.
 * @throws PermanentError when `data` is missing or not an object.
 */
export function paddleSubject(payload: Record<string, unknown>): Subject {
  const data = payload.data;
  if (!isObject(data)) throw new PermanentError("Cannot read Paddle event: it has no data object");
  return { object: data, key: text(data.id) };
}

/** The `Paddle-Signature` value Paddle sends for `body` signed with `secret` at `timestampSec` (unix seconds). */
export async function signPaddlePayload(body: string, secret: string, timestampSec: number): Promise<string> {
  return `ts=${timestampSec};h1=${toHex(await hmacSha256(secret, `${timestampSec}:${body}`))}`;
}

/** The Paddle Billing provider: inbox `provider = 'paddle'`, URL `/webhooks/paddle/<endpoint>`. */
export const paddleProvider: WebhookProvider = {
  name: "paddle",
  // Paddle keeps notifications for 90 days and can replay one with the same event_id (Paddle docs,
  // "Replay a notification": "Notifications older than 90 days aren't retained").
  resendWindowMs: 90 * 86_400_000,
  toleranceSec: PADDLE_TOLERANCE_SEC,
  verify: verifyPaddle,
  subject: paddleSubject,
};
