import Stripe from "stripe";
import { AppError, PermanentError } from "../errors.ts";
import { jsonbCopy } from "./jsonb-text.ts";
import { isObject, isoDate } from "./json-event.ts";
import type { Subject, VerifiedEvent, VerifyInput, WebhookProvider } from "./provider.ts";
import { accountAndMode, checkStripeTimestamp, STRIPE_EVENTS_KEPT_MS, stripeVerification } from "./stripe.ts";

/** The thin event type that reports a window in which Stripe failed to create events (an event backfill recovers them). */
export const EVENT_GENERATION_RESOLVED = "v2.core.health.event_generation_failure.resolved";

/** Event ids as the classic provider accepts them (thin ids look like `evt_test_65R…`). */
const EVENT_ID = /^evt_[A-Za-z0-9_]{1,250}$/;
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
  if (!matched) throw new AppError("signature_mismatch", "Cannot verify Stripe signature: no v1 signature matches");
  return toVerifiedNotification(input.body);
}

/** Parses and checks the verified body, from its jsonb-storable copy when it needs one (jsonb-text.ts). */
function toVerifiedNotification(body: string): VerifiedEvent {
  const parsed = readJson(body);
  const checked = readThinNotification(parsed);
  const copy = jsonbCopy(body);
  const payload = parsed as Record<string, unknown>;
  const createdAt = isoDate(checked.created);
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
 * "v2.core.event"`, an `evt_…` id, a type, and when present a `related_object` of three strings
 * (`id`, `type`, `url`) and a `snapshot_event` that is an event id. The form of `related_object.url`
 * is not checked here: a type without a handler is recorded `ignored` whatever it points to (Stripe
 * has nested paths such as `/v1/accounts/{account}/persons/{id}`), and the worker checks the URL just
 * before it reads it (worker/stripe-fetch.ts `stripeApiPath`).
 * @throws AppError `invalid_event` naming what is wrong (a classic event says so).
 */
export function readThinNotification(value: unknown): ThinNotification {
  const n = value as Record<string, unknown> | null;
  const invalid = (what: string) => new AppError("invalid_event", `Signed body is not a Stripe thin event notification: ${what}`);
  if (!isObject(n)) throw invalid("expected a JSON object");
  if (n.object === "event") throw invalid('it is a classic event (object "event"): send it to a classic endpoint');
  if (n.object !== "v2.core.event") throw invalid('expected object "v2.core.event"');
  if (typeof n.id !== "string" || !EVENT_ID.test(n.id)) throw invalid("expected an id evt_…");
  if (typeof n.type !== "string" || n.type.length === 0 || n.type.length > 200) throw invalid("expected a type");
  const related = n.related_object as Record<string, unknown> | null | undefined;
  if (related !== undefined && related !== null) {
    const ok =
      typeof related === "object" && typeof related.id === "string" && typeof related.type === "string" && typeof related.url === "string";
    if (!ok) throw invalid("related_object must have an id, a type and a url, each a string");
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
 * What a `v2.core.health.event_generation_failure.resolved` event reports as failed, its `data.impact`
 * (stripe-node `V2CoreHealthEventGenerationFailureResolvedEvent.Data.Impact`, `src/resources/V2/Core/Events.ts`
 * of its beta line; Stripe docs "Handle webhook event generation failures"): one event Stripe did not
 * create, so no event id exists for it and the Events API cannot list it.
 */
export interface HealthImpact {
  /** The type of the event Stripe failed to create, as Stripe names it: `invoice.paid` (a v1 type) or `v2.…`. */
  event_type: string;
  /** The object that event was about (`id`, `type`, `url`). */
  related_object: RelatedObject;
  /** The connected account (`acct_…`) the event was for; absent for the platform's own. */
  context?: string;
}

/**
 * Reads `data.impact` of a full health event (`GET /v2/core/events/<id>`): `event_type`,
 * `related_object` (`id`, `type`, `url`: strings) and the optional `context`. The URL's form is not
 * checked here (worker/stripe-fetch.ts checks it before a read).
 * @throws PermanentError naming the field when the event lacks one or it is not a string.
 */
export function readHealthImpact(event: Record<string, unknown>): HealthImpact {
  const data = event.data as Record<string, unknown> | null | undefined;
  const impact = data?.impact as Record<string, unknown> | null | undefined;
  const related = impact?.related_object as Record<string, unknown> | null | undefined;
  const bad = (field: string) =>
    new PermanentError(`Cannot read the health event ${String(event.id)}: data.impact.${field} is missing or not a string`);
  if (typeof impact?.event_type !== "string" || impact.event_type === "") throw bad("event_type");
  for (const field of ["id", "type", "url"] as const) if (typeof related?.[field] !== "string") throw bad(`related_object.${field}`);
  if (impact.context !== undefined && impact.context !== null && typeof impact.context !== "string") throw bad("context");
  const { id, type, url } = related as unknown as RelatedObject;
  return {
    event_type: impact.event_type,
    related_object: { id, type, url },
    ...(typeof impact.context === "string" ? { context: impact.context } : {}),
  };
}

/** The thin handler type of a health impact's `event_type`: a v1 type gains its `v1.` prefix (`invoice.paid` → `v1.invoice.paid`); `v1.…`/`v2.…` stay. */
export function thinTypeOf(eventType: string): string {
  return /^v[12]\./.test(eventType) ? eventType : `v1.${eventType}`;
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
/**
 * The thin-event provider: inbox `provider = 'stripe-thin'`. Resend window: Stripe lists v2 events for
 * 30 days (API reference, "List events" of /v2/core/events), as classic ones.
 */
export const stripeThinProvider: WebhookProvider = {
  name: "stripe-thin",
  resendWindowMs: STRIPE_EVENTS_KEPT_MS,
  verify: verifyThinNotification,
  subject: thinSubject,
};
