import { AppError, PermanentError } from "../errors.ts";
import { anyHmacMatches, fromBase64, fromHex, hmacSha256, toBase64 } from "./hmac.ts";
import { isObject, jsonEvent, text } from "./json-event.ts";
import type { Subject, VerifiedEvent, VerifyInput, WebhookProvider } from "./provider.ts";

/** One `NotificationRequestItem` as Adyen sends it (Adyen Notification API, `NotificationRequestItem`). */
type Item = Record<string, unknown>;

/**
 * Adyen's HMAC signing string of one item (Adyen docs, "Verify HMAC signatures", "Verify using your own
 * solution"; Adyen's libraries' `calculateNotificationHMAC`): `pspReference`, `originalReference`,
 * `merchantAccountCode`, `merchantReference`, `amount.value`, `amount.currency`, `eventCode`, `success`,
 * joined by `:`, a missing field as the empty string, nothing escaped (escaping `\` and `:` belongs to
 * the hosted payment pages' signature, not to webhooks).
 */
export function adyenSigningString(item: Item): string {
  const amount = isObject(item.amount) ? item.amount : {};
  const field = (v: unknown) => (v === undefined || v === null ? "" : String(v));
  return [
    item.pspReference,
    item.originalReference,
    item.merchantAccountCode,
    item.merchantReference,
    amount.value,
    amount.currency,
    item.eventCode,
    item.success,
  ]
    .map(field)
    .join(":");
}

/**
 * Verifies an Adyen standard webhook (Adyen docs, "Webhooks", "Verify HMAC signatures"): the body is a
 * batch `{ "live": "true"|"false", "notificationItems": [{ "NotificationRequestItem": {…} }, …] }` and
 * EVERY item must carry `additionalData.hmacSignature`, the base64 HMAC-SHA256 of its
 * {@link adyenSigningString} with one of the endpoint's HMAC keys (given as hex, decoded to bytes; two
 * during a rotation). One item missing, malformed or not matching refuses the whole delivery. The
 * signature lives inside the JSON, so the body is parsed before any HMAC is computed; nothing of it is
 * used before every item verified. Each item becomes one event: id `<pspReference>:<eventCode>:<success>`
 * (`:` cannot occur in any of the three: a 16-character alphanumeric reference, an upper-case code,
 * `true`/`false`), type `eventCode` (`AUTHORISATION`), subject the item keyed by `originalReference`
 * (the payment a modification belongs to) else `pspReference`, no creation time stored (`eventDate` is not
 * among the fields the HMAC covers), `livemode` from `live`. Its stored body is `{ "live", "NotificationRequestItem" }` re-serialized: Adyen signs
 * fields, not bytes, so this is as much as was signed. Adyen signs no timestamp.
 * @throws AppError `signature_missing` | `signature_malformed` | `signature_mismatch` | `invalid_event`.
 */
export async function verifyAdyenAll(input: VerifyInput): Promise<VerifiedEvent[]> {
  const batch = readBatch(input.body);
  const keys = input.secrets.map((s) => fromHex(s) ?? new Uint8Array());
  const events: VerifiedEvent[] = [];
  for (const [i, item] of batch.items.entries()) {
    const at = `notificationItems[${i}]`;
    const additional = isObject(item.additionalData) ? item.additionalData : {};
    const signature = additional.hmacSignature;
    if (signature === undefined || signature === "")
      throw new AppError("signature_missing", `Missing Adyen HMAC signature: ${at} has no additionalData.hmacSignature`);
    const bytes = typeof signature === "string" ? fromBase64(signature) : undefined;
    if (!bytes || bytes.length !== 32)
      throw new AppError("signature_malformed", `Cannot parse Adyen HMAC signature of ${at}: expected the base64 of 32 bytes`);
    if (!(await anyHmacMatches(keys, adyenSigningString(item), [bytes])))
      throw new AppError(
        "signature_mismatch",
        `Cannot verify Adyen HMAC signature of ${at}: it does not match; nothing of the delivery was recorded`,
      );
    events.push(itemEvent(batch.live, item));
  }
  return events;
}

/**
 * {@link verifyAdyenAll} for a delivery of exactly one item (Adyen's default: one item per request),
 * for callers that take one event; the receiver uses `verifyAll`.
 * @throws AppError as {@link verifyAdyenAll}; `invalid_event` for a batch of more than one item.
 */
export async function verifyAdyen(input: VerifyInput): Promise<VerifiedEvent> {
  const events = await verifyAdyenAll(input);
  const [event] = events;
  if (events.length !== 1 || !event)
    throw new AppError("invalid_event", `Adyen delivery holds ${events.length} notification items: receive it as a batch (verifyAll)`);
  return event;
}

/**
 * The subject of a stored Adyen item `{ live, NotificationRequestItem }`: the item, keyed by
 * `originalReference` when present, else `pspReference`.
 * @throws PermanentError when the payload holds no item object.
 */
export function adyenSubject(payload: Record<string, unknown>): Subject {
  const item = payload.NotificationRequestItem;
  if (!isObject(item)) throw new PermanentError("Cannot read Adyen event: it has no NotificationRequestItem object");
  return { object: item, key: text(item.originalReference) ?? text(item.pspReference) };
}

/**
 * `item` with `additionalData.hmacSignature` set as Adyen signs it with `hexKey` (base64 HMAC-SHA256 of
 * {@link adyenSigningString}); for the delivery tool and tests.
 * @throws Error when `hexKey` is not hex.
 */
export async function signAdyenItem(item: Item, hexKey: string): Promise<Item> {
  const key = fromHex(hexKey);
  if (!key) throw new Error("Cannot sign an Adyen item: the HMAC key is not hex");
  const hmacSignature = toBase64(await hmacSha256(key, adyenSigningString(item)));
  return { ...item, additionalData: { ...(isObject(item.additionalData) ? item.additionalData : {}), hmacSignature } };
}

/** The Adyen provider: inbox `provider = 'adyen'`, URL `/webhooks/adyen/<endpoint>`, answered 200 `[accepted]` after the commit. */
export const adyenProvider: WebhookProvider = {
  name: "adyen",
  // Adyen queues an unacknowledged notification and retries it for up to 30 days (Adyen docs,
  // "Webhooks: Retries and failures").
  resendWindowMs: 30 * 86_400_000,
  secretProblem: (secret) =>
    fromHex(secret) && secret.length >= 32
      ? undefined
      : "is not an Adyen HMAC key (an even number of hex digits, at least 32, as the Customer Area shows it)",
  verify: verifyAdyen,
  verifyAll: verifyAdyenAll,
  subject: adyenSubject,
  accepted: () => new Response("[accepted]", { status: 200, headers: { "content-type": "text/plain; charset=utf-8" } }),
};

/** Parses and checks the batch's shape before any HMAC. @throws AppError `invalid_event`. */
function readBatch(body: string): { live: string; items: Item[] } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    parsed = undefined;
  }
  const refuse = (why: string) => new AppError("invalid_event", `Body is not an Adyen notification: ${why}`);
  if (!isObject(parsed)) throw refuse("expected a JSON object");
  if (parsed.live !== "true" && parsed.live !== "false") throw refuse('live must be "true" or "false"');
  const list = parsed.notificationItems;
  if (!Array.isArray(list) || list.length === 0) throw refuse("notificationItems must be a non-empty array");
  const items = list.map((entry, i) => {
    const item = isObject(entry) ? entry.NotificationRequestItem : undefined;
    if (!isObject(item)) throw refuse(`notificationItems[${i}] has no NotificationRequestItem object`);
    if (
      !text(item.pspReference, 64) ||
      !/^[A-Z0-9_]{1,100}$/.test(String(item.eventCode)) ||
      (item.success !== "true" && item.success !== "false")
    )
      throw refuse(`notificationItems[${i}] needs pspReference, an upper-case eventCode and success "true" or "false"`);
    if (String(item.pspReference).includes(":")) throw refuse(`notificationItems[${i}] has a pspReference with ":"`);
    return item;
  });
  return { live: parsed.live, items };
}

/** One verified item as an event (see {@link verifyAdyenAll}); its body is the item with the batch's `live`. */
function itemEvent(live: string, item: Item): VerifiedEvent {
  const body = JSON.stringify({ live, NotificationRequestItem: item });
  const id = `${String(item.pspReference)}:${String(item.eventCode)}:${String(item.success)}`;
  const event = jsonEvent(body, "an Adyen notification item", (payload) => ({
    id,
    type: String(item.eventCode),
    subject: adyenSubject(payload),
  }));
  return { ...event, livemode: live === "true" };
}
