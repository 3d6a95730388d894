import Stripe from "stripe";
import { AppError, PermanentError } from "../errors.ts";
import { jsonbCopy } from "./jsonb-text.ts";
import type { Subject, VerifiedEvent, VerifyInput, WebhookProvider } from "./provider.ts";
import { accountAndMode, checkStripeTimestamp, stripeVerification } from "./stripe.ts";

/** The thin event type that reports a window in which Stripe failed to create events (an event backfill recovers them). */
export const EVENT_GENERATION_RESOLVED = "v2.core.health.event_generation_failure.resolved";

/** Event ids as the classic provider accepts them (thin ids look like `evt_test_65R…`). */
const EVENT_ID = /^evt_[A-Za-z0-9_]{1,250}$/;
/**
 * What a `related_object.url` may be: an API path of Stripe's (v1 or v2) and an id, nothing else. The
 * worker fetches it as given with our API key, so a signed notification must not point elsewhere.
 */
const RELATED_URL = /^\/v[12]\/[a-z_]+(?:\/[a-z_]+)*\/[A-Za-z0-9_]{1,250}$/;

/** The pointer a thin notification carries (stripe-node `V2.Core.Events.RelatedObject`). */
export interface RelatedObject {
  id: string;
  type: string;
  url: string;
}

/**
 * A thin event notification as Stripe sends it to an Event Destination (stripe-node 23
 * `V2.Core.EventNotification`, `EventNotificationBase`): no object, only what changed and where to read it.
 */
export interface ThinNotification {
  id: string;
  object: "v2.core.event";
  /** `v1.invoice.paid`, `v2.core.health.event_generation_failure.resolved`, … */
  type: string;
  /** ISO 8601 time. */
  created: string;
  livemode: boolean;
  related_object?: RelatedObject | null;
  /** The id of the classic (snapshot) event for the same change, while both are sent. */
  snapshot_event?: string | null;
  context?: string | null;
}

/**
 * Verifies a thin event notification: our timestamp rules first ({@link checkStripeTimestamp}: ±tolerance
 * in both directions, tolerance > 0 kept as given), then stripe-node's `parseEventNotificationAsync`
 * with the SubtleCrypto provider over the exact body, once per secret of the endpoint (a rotation may
 * have several; any match), then the notification's shape ({@link readThinNotification}).
 * @throws AppError `invalid_event` (empty body, a classic event, not a notification) | `signature_missing` |
 *   `signature_malformed` | `timestamp_out_of_tolerance` | `signature_mismatch`
 */
export async function verifyThinNotification(input: VerifyInput): Promise<VerifiedEvent> {
  if (input.body === "") throw new AppError("invalid_event", "Webhook body is empty: expected a Stripe thin event notification");
  const header = checkStripeTimestamp(input);
  const { client, crypto } = stripeVerification;
  let matched = false;
  for (const secret of input.secrets) {
    try {
      await client.parseEventNotificationAsync(input.body, header, secret, input.toleranceSec, crypto, input.nowMs);
      matched = true;
      break;
    } catch (err) {
      if (err instanceof Stripe.errors.StripeSignatureVerificationError) continue;
      // The signature matched, but the body is not JSON, or is a classic event (stripe-node refuses it).
      matched = true;
      break;
    }
  }
  if (!matched) {
    throw new AppError(
      "signature_mismatch",
      `Cannot verify Stripe signature: no v1 signature matches any of the endpoint's ${input.secrets.length} secret(s)`,
    );
  }
  return toVerifiedNotification(input.body);
}

/** Parses and checks the verified body, from its jsonb-storable copy when it needs one (jsonb-text.ts). */
function toVerifiedNotification(body: string): VerifiedEvent {
  const parsed = readJson(body);
  const checked = readThinNotification(parsed);
  const copy = jsonbCopy(body);
  const payload = parsed as Record<string, unknown>;
  const created = new Date(checked.created);
  const createdAt = Number.isNaN(created.getTime()) ? undefined : created;
  const scope = accountAndMode(payload, "context");
  if (!copy) return { id: checked.id, type: checked.type, payload, subject: thinSubject(payload), body, createdAt, ...scope };
  const clean = JSON.parse(copy.json) as Record<string, unknown>;
  const cleanChecked = readThinNotification(clean);
  return {
    id: cleanChecked.id,
    type: cleanChecked.type,
    payload: clean,
    subject: thinSubject(clean),
    body,
    createdAt,
    ...scope,
    sanitized: { ...copy, typeChanged: cleanChecked.type !== checked.type },
  };
}

function readJson(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    throw new AppError("invalid_event", "Signed body is not a Stripe thin event notification: it is not JSON");
  }
}

/**
 * Checks the shape of a thin notification (stripe-node `EventNotificationBase`): `object:
 * "v2.core.event"`, an `evt_…` id, a type, and when present a `related_object` whose `url` is an API
 * path and a `snapshot_event` that is an event id.
 * @throws AppError `invalid_event` naming what is wrong (a classic event says so).
 */
export function readThinNotification(value: unknown): ThinNotification {
  const n = value as Record<string, unknown> | null;
  const invalid = (what: string) => new AppError("invalid_event", `Signed body is not a Stripe thin event notification: ${what}`);
  if (typeof n !== "object" || n === null || Array.isArray(n)) throw invalid("expected a JSON object");
  if (n.object === "event") throw invalid('it is a classic event (object "event"): send it to a classic endpoint');
  if (n.object !== "v2.core.event") throw invalid('expected object "v2.core.event"');
  if (typeof n.id !== "string" || !EVENT_ID.test(n.id)) throw invalid("expected an id evt_…");
  if (typeof n.type !== "string" || n.type.length === 0 || n.type.length > 200) throw invalid("expected a type");
  const related = n.related_object as Record<string, unknown> | null | undefined;
  if (related !== undefined && related !== null) {
    const ok =
      typeof related === "object" &&
      typeof related.id === "string" &&
      typeof related.type === "string" &&
      typeof related.url === "string" &&
      RELATED_URL.test(related.url);
    if (!ok) throw invalid("related_object must have an id, a type and a url that is a Stripe API path");
  }
  if (
    n.snapshot_event !== undefined &&
    n.snapshot_event !== null &&
    (typeof n.snapshot_event !== "string" || !EVENT_ID.test(n.snapshot_event))
  )
    throw invalid("snapshot_event must be an event id evt_…");
  return n as unknown as ThinNotification;
}

/**
 * The subject of a stored thin notification: the notification itself (it carries no object; the worker
 * fetches what it points to), keyed by the related object's id so a batch locks in a stable order.
 * @throws PermanentError when the payload is not a thin notification.
 */
export function thinSubject(payload: Record<string, unknown>): Subject {
  if (payload.object !== "v2.core.event" || typeof payload.id !== "string")
    throw new PermanentError("Cannot read Stripe thin event: it is not a v2.core.event notification");
  const related = payload.related_object as { id?: unknown } | null | undefined;
  return { object: payload, key: typeof related?.id === "string" ? related.id : undefined };
}

/**
 * Stripe thin events (Event Destinations, API 2026-09-30.endive and later): inbox `provider =
 * 'stripe-thin'`, verified by {@link verifyThinNotification}, read by {@link thinSubject}. Served at
 * `/webhooks/stripe/<endpoint>` like classic endpoints (the endpoint's kind picks the provider).
 */
export const stripeThinProvider: WebhookProvider = { name: "stripe-thin", verify: verifyThinNotification, subject: thinSubject };
