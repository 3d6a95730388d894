import { Webhook } from "standardwebhooks";
import { AppError, PermanentError } from "../errors.ts";
import { sameText } from "./hmac.ts";
import { isObject, text } from "./json-event.ts";
import { jsonbCopy } from "./jsonb-text.ts";
import { checkTimestamp, type Subject, type VerifiedEvent, type VerifyInput, type WebhookProvider } from "./provider.ts";

// One Webhook per secret: its constructor decodes the base64 key.
const signers = new Map<string, Webhook>();

/**
 * Verifies a Standard Webhooks delivery (standardwebhooks.com spec, "Verifying webhook authenticity"):
 * `webhook-id`, `webhook-timestamp` (integer unix seconds) and `webhook-signature` (space-separated
 * `v1,<base64>` entries) must be present; the timestamp must be within ±`toleranceSec` of `nowMs`; one
 * `v1` entry must equal HMAC-SHA256 over `<id>.<timestamp>.<exact body>` with one of the endpoint's
 * secrets (`whsec_<base64>`), computed by the `standardwebhooks` package's `sign`. Its own `verify` is
 * not used: it reads the real clock with a fixed 5 min tolerance and takes `parseInt`'s reading of
 * `12abc` as 12. Then the body must be an event `{ type, data: {…} }`. The event id is `webhook-id`.
 * @throws AppError `signature_missing` | `signature_malformed` | `timestamp_out_of_tolerance` |
 *   `signature_mismatch` | `invalid_event`; Error when a secret is not base64 (a configuration fault).
 */
export async function verifyStandardWebhook(input: VerifyInput): Promise<VerifiedEvent> {
  const id = input.headers.get("webhook-id");
  const timestamp = input.headers.get("webhook-timestamp");
  const signature = input.headers.get("webhook-signature");
  if (!id || !timestamp || !signature) {
    throw new AppError(
      "signature_missing",
      "Missing Standard Webhooks header: webhook-id, webhook-timestamp and webhook-signature are required",
    );
  }
  if (!/^[\x21-\x7e]{1,255}$/.test(id))
    throw new AppError("signature_malformed", "Cannot parse webhook-id: expected 1 to 255 printable ASCII characters");
  if (!/^\d{1,12}$/.test(timestamp))
    throw new AppError("signature_malformed", "Cannot parse webhook-timestamp: expected integer unix seconds");
  const passed = signature
    .split(" ")
    .filter((s) => s.startsWith("v1,"))
    .map((s) => s.slice(3));
  if (passed.length === 0) throw new AppError("signature_malformed", "Cannot parse webhook-signature: no v1 signature");
  checkTimestamp("Standard Webhooks", Number(timestamp), input);
  const signedAt = new Date(Number(timestamp) * 1000);
  const matches = input.secrets.some((secret) => {
    const expected = signerFor(secret).sign(id, signedAt, input.body).slice(3);
    return passed.some((candidate) => sameText(candidate, expected));
  });
  if (!matches) throw new AppError("signature_mismatch", "Cannot verify Standard Webhooks signature: no v1 signature matches");
  return toVerifiedEvent(id, input.body);
}

/**
 * The subject of a Standard Webhooks event: `data`, keyed by `data.id` when it is a non-empty string.
 * @throws PermanentError when `data` is missing or not an object.
 */
export function standardWebhooksSubject(payload: Record<string, unknown>): Subject {
  const data = payload.data;
  if (!isObject(data)) throw new PermanentError("Cannot read Standard Webhooks event: it has no data object");
  return { object: data, key: typeof data.id === "string" && data.id !== "" ? data.id : undefined };
}

/** The Standard Webhooks provider: inbox `provider = 'standard-webhooks'`. */
export const standardWebhooksProvider: WebhookProvider = {
  name: "standard-webhooks",
  // The sender's: Svix, the reference sender, retries for about 27 hours and lets the sender replay a
  // message with its webhook-id while it keeps the payload, 90 days by default (Svix docs, "Retry
  // Schedule" and "Payload Retention").
  resendWindowMs: 90 * 86_400_000,
  verify: verifyStandardWebhook,
  subject: standardWebhooksSubject,
};

function signerFor(secret: string): Webhook {
  let signer = signers.get(secret);
  if (!signer) {
    try {
      signer = new Webhook(secret);
    } catch {
      throw new Error("Cannot verify Standard Webhooks signature: an endpoint secret is not whsec_ followed by base64");
    }
    signers.set(secret, signer);
  }
  return signer;
}

/** Parses the verified body as an event; reads it from its jsonb-storable copy when it needs one (jsonb-text.ts). */
function toVerifiedEvent(id: string, body: string): VerifiedEvent {
  const checked = checkEvent(body);
  const copy = jsonbCopy(body);
  if (!copy) return { id, ...checked, body };
  const clean = checkEvent(copy.json);
  return { id, ...clean, body, sanitized: { ...copy, typeChanged: clean.type !== checked.type } };
}

function checkEvent(json: string): { type: string; payload: Record<string, unknown>; subject: Subject } {
  let event: unknown;
  try {
    event = JSON.parse(json);
  } catch {
    event = undefined;
  }
  const type = isObject(event) ? text(event.type, 200) : undefined;
  if (!isObject(event) || type === undefined || !isObject(event.data))
    throw new AppError("invalid_event", "Signed body is not a Standard Webhooks event: expected a JSON object with type and a data object");
  return { type, payload: event, subject: standardWebhooksSubject(event) };
}
