// Thin event notifications for tests, typed by stripe-node's own notification types: a fixture that
// stops matching what stripe-node 23 describes fails `bun run typecheck`, before any test runs.
import type Stripe from "stripe";
import { EVENT_GENERATION_RESOLVED } from "../../src/providers/stripe-thin.ts";

/** A notification body as sent: stripe-node's type without the methods it attaches when parsing, `context` as the string it is on the wire. */
export type ThinBody<N> = Omit<N, "fetchEvent" | "fetchRelatedObject" | "context"> & { context?: string | null };

/** A v1 notification body with a related object, its type any of the notification types stripe-node knows. */
export type V1ThinBody = Omit<ThinBody<Stripe.Events.V1InvoicePaidEventNotification>, "type"> & {
  type: Stripe.V2.Core.EventNotification["type"];
};

/** Where a v1 object is read, as Stripe's related_object.url gives it. */
const PATHS: Record<string, string> = { invoice: "invoices", plan: "plans", charge: "charges", refund: "refunds", dispute: "disputes" };

/**
 * The thin notification of a classic event (same change): `v1.<type>`, a related_object pointing at
 * `data.object`, `snapshot_event` = the classic event's id. `created` is the classic `created` as ISO time.
 */
export function thinFromClassic(classicBody: string, thinId: string, withSnapshot = true): V1ThinBody {
  const classic = JSON.parse(classicBody) as {
    id: string;
    type: string;
    created: number;
    data: { object: { id: string; object: string } };
  };
  const object = classic.data.object;
  const body: ThinBody<Stripe.Events.V1InvoicePaidEventNotification> = {
    id: thinId,
    object: "v2.core.event",
    type: "v1.invoice.paid",
    created: new Date(classic.created * 1000).toISOString(),
    livemode: false,
    reason: { type: "request", request: { id: "req_thin_test", idempotency_key: "idem_thin_test" } },
    related_object: { id: object.id, type: object.object, url: `/v1/${PATHS[object.object] ?? `${object.object}s`}/${object.id}` },
    ...(withSnapshot ? { snapshot_event: classic.id } : {}),
  };
  // Only the type differs between the v1 notification interfaces of one related object type.
  return { ...body, type: `v1.${classic.type}` as Stripe.V2.Core.EventNotification["type"] };
}

/** The health notification that reports event generation recovered (not yet typed by stripe-node 23.1.0: its base shape). */
export function healthNotification(
  id: string,
  createdIso: string,
): Omit<ThinBody<Stripe.Events.V1InvoicePaidEventNotification>, "type" | "related_object"> & { type: string } {
  return { id, object: "v2.core.event", type: EVENT_GENERATION_RESOLVED, created: createdIso, livemode: false };
}

/**
 * `data` of a `v2.core.health.event_generation_failure.resolved` event as stripe-node describes it
 * (`V2CoreHealthEventGenerationFailureResolvedEvent.Data` in `src/resources/V2/Core/Events.ts` of its beta
 * and private-preview lines; stripe-node 23.1.0 does not type it yet), the related object typed by the
 * pinned stripe-node's `V2.Core.Events.RelatedObject`. No field says when the failure began.
 */
export interface HealthEventData {
  alert_id: string;
  grouping_key: string;
  impact: {
    /** The connected account the event was for; only present for a connected account. */
    context?: string;
    /** The type of the event Stripe failed to generate, e.g. `invoice.paid`. */
    event_type: string;
    related_object: Stripe.V2.Core.Events.RelatedObject;
  };
  resolved_at: string;
  summary: string;
}

/** The full v2 event of {@link healthNotification}, as `GET /v2/core/events/<id>` returns it. */
export function healthEvent(id: string, createdIso: string, data: HealthEventData): Record<string, unknown> {
  return { ...healthNotification(id, createdIso), data, created: createdIso };
}
