import { AppError, PermanentError } from "../errors.ts";
import { anyHmacMatches, fromBase64, hmacSha256, toBase64 } from "./hmac.ts";
import { isObject, jsonEvent, text } from "./json-event.ts";
import type { Subject, VerifiedEvent, VerifyInput, WebhookProvider } from "./provider.ts";

/**
 * Verifies a Shopify webhook delivery (shopify.dev, "Deliver webhooks through HTTPS", verification, and
 * "Ignore duplicate webhooks"): `X-Shopify-Hmac-Sha256` must be the base64 HMAC-SHA256 of the exact body
 * with one of the endpoint's secrets (the app's client secret; two during a rotation).
 * `X-Shopify-Topic` is the event type as Shopify names it (`orders/paid`); `X-Shopify-Event-Id` is the
 * inbox event id: it is the same on every delivery of one event, whereas `X-Shopify-Webhook-Id` changes
 * per delivery attempt and would let a retry through as a new event. No creation time is stored
 * (`createdAt` unset): `X-Shopify-Triggered-At` is a header the HMAC does not cover. The body
 * must be a JSON object (the resource: Shopify has no envelope). Shopify signs no timestamp.
 * @throws AppError `signature_missing` | `signature_malformed` | `signature_mismatch` | `invalid_event`.
 */
export async function verifyShopify(input: VerifyInput): Promise<VerifiedEvent> {
  const signature = input.headers.get("x-shopify-hmac-sha256");
  const topic = input.headers.get("x-shopify-topic");
  const eventId = input.headers.get("x-shopify-event-id");
  if (!signature || !topic || !eventId)
    throw new AppError(
      "signature_missing",
      "Missing Shopify header: X-Shopify-Hmac-Sha256, X-Shopify-Topic and X-Shopify-Event-Id are required",
    );
  const bytes = fromBase64(signature);
  if (!bytes || bytes.length !== 32)
    throw new AppError("signature_malformed", "Cannot parse X-Shopify-Hmac-Sha256: expected the base64 of 32 bytes");
  if (!/^[a-z_]{1,100}(?:\/[a-z_]{1,100}){1,3}$/.test(topic))
    throw new AppError("signature_malformed", "Cannot parse X-Shopify-Topic: expected a topic such as orders/paid");
  if (!/^[\x21-\x7e]{1,255}$/.test(eventId))
    throw new AppError("signature_malformed", "Cannot parse X-Shopify-Event-Id: expected 1 to 255 printable ASCII characters");
  if (!(await anyHmacMatches(input.secrets, input.body, [bytes])))
    throw new AppError("signature_mismatch", "Cannot verify Shopify signature: X-Shopify-Hmac-Sha256 does not match");
  return jsonEvent(input.body, "a Shopify webhook payload: a JSON object", (payload) => ({
    id: eventId,
    type: topic,
    subject: shopifySubject(payload),
  }));
}

/**
 * The subject of a Shopify payload: the payload itself (the resource), keyed by `admin_graphql_api_id`
 * (`gid://shopify/Order/…`, a string: the numeric `id` can exceed 2^53 and lose digits in JSON.parse),
 * else none.
 */
export function shopifySubject(payload: Record<string, unknown>): Subject {
  return { object: payload, key: text(payload.admin_graphql_api_id) };
}

/** The `X-Shopify-Hmac-Sha256` value Shopify sends for `body` signed with `secret`: base64 HMAC-SHA256 of the exact body. */
export async function signShopifyPayload(body: string, secret: string): Promise<string> {
  return toBase64(await hmacSha256(secret, body));
}

/** The Shopify provider: inbox `provider = 'shopify'`, URL `/webhooks/shopify/<endpoint>`. */
export const shopifyProvider: WebhookProvider = {
  name: "shopify",
  // Shopify retries a failed delivery 8 times over 4 hours, with the original payload and event id
  // (Shopify developer changelog, "Updates to webhook retry mechanism", 2024-09-10); no manual resend.
  resendWindowMs: 4 * 3_600_000,
  verify: verifyShopify,
  subject: (payload) => {
    if (!isObject(payload)) throw new PermanentError("Cannot read Shopify event: its payload is not an object");
    return shopifySubject(payload);
  },
};
