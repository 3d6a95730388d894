import type { Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import { recordBackfillRequest } from "./backfill-requests.ts";
import { EVENT_GENERATION_RESOLVED, readHealthImpact, thinTypeOf } from "../providers/stripe-thin.ts";
import { changeOnceTable } from "./change-once.ts";
import { handlerTable, type Handler, type HandlerContext, type HandlerTable } from "./handler-table.ts";

/** How far before its end a health window starts: 24 h, in ms (the event names no start). */
export const HEALTH_LOOKBACK_MS = 24 * 3_600_000;

/** A window of event creation times to backfill, from a health notification, and why it is that window. */
export interface BackfillWindow {
  start: Date;
  end: Date;
  /** One line for the worker's log: which fields gave the window. */
  basis: string;
}

/**
 * The window to backfill after a `v2.core.health.event_generation_failure.resolved` event. The event
 * says when the failure was resolved (`data.resolved_at`) but not when it began (its `data` is
 * `alert_id`, `grouping_key`, `impact`, `resolved_at`, `summary`: stripe-node
 * `V2CoreHealthEventGenerationFailureResolvedEvent.Data`), so the window ends at `resolved_at` (else
 * the event's `created`) and starts `lookbackMs` earlier. A wider window costs API reads only, never a
 * double effect: backfilled events go through the inbox key like any other.
 * @throws PermanentError when no end can be read.
 */
export function healthWindow(event: Record<string, unknown>, lookbackMs = HEALTH_LOOKBACK_MS): BackfillWindow {
  const data = (event.data ?? {}) as Record<string, unknown>;
  const time = (v: unknown): Date | undefined => {
    if (typeof v !== "string") return undefined;
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? undefined : d;
  };
  const resolved = time(data.resolved_at);
  const end = resolved ?? time(event.created);
  if (!end) throw new PermanentError("Cannot read the health event's window: no resolved_at and no created time");
  const hours = lookbackMs / 3_600_000;
  const basis = `${hours} h before ${resolved ? "data.resolved_at" : "the event's created (no data.resolved_at)"}: the event names no start`;
  return { start: new Date(end.getTime() - lookbackMs), end, basis };
}

/**
 * What the worker read for a health notification (worker/stripe-fetch.ts), the object its handler
 * applies: the full event (`GET /v2/core/events/<id>`) and Stripe's current state of the object its
 * `data.impact.related_object` names (read for the impact's `context` account), or null when nothing
 * was read (no handler applies the impact's event type, or Stripe no longer has the object).
 */
export interface HealthRead {
  event: Record<string, unknown>;
  current: Record<string, unknown> | null;
}

function readHealthRead(object: Record<string, unknown>): HealthRead {
  const event = object.event as Record<string, unknown> | undefined;
  if (typeof event !== "object" || event === null || !("current" in object))
    throw new PermanentError("Cannot apply a health notification without the worker's read of its event (replay it through the worker)");
  return { event, current: (object.current as Record<string, unknown> | null) ?? null };
}

/**
 * The handler of the health notification, over the thin table `v1` (its `v1.<type>` handlers, each
 * claiming its change): in the notification's transaction,
 * 1. applies the change Stripe created no event for: the handler of the impact's event type
 *    (`v1.<event_type>`) runs on the object's current state, for the impact's account, claiming the
 *    health event's own id as the change (there is no event id of the change to claim), so the same
 *    notification at a second endpoint applies nothing; a later genuine event of the change is
 *    absorbed by the handler's business keys (an invoice pays once, a payment books once);
 * 2. records a request to backfill the window ({@link healthWindow}), once per notification (the event
 *    backfill serves it: reconcile/catch-up.ts `runBackfillRequests`).
 */
function recoverThenBackfill(v1: HandlerTable): Handler {
  return async (tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> => {
    const { event, current } = readHealthRead(object);
    // The worker read this impact before fetching (stripe-fetch.ts): it is readable here too.
    const impact = readHealthImpact(event);
    if (current) {
      const type = thinTypeOf(impact.event_type);
      const handler = Object.hasOwn(v1, type) ? v1[type] : undefined;
      if (handler) await handler(tx, current, { ...context, eventType: type, changeId: context.eventId, account: impact.context ?? "" });
    }
    const window = healthWindow(event);
    await recordBackfillRequest(tx, {
      endpoint: context.endpoint,
      account: impact.context ?? "",
      requestedBy: context.eventId,
      start: window.start,
      end: window.end,
    });
  };
}

/**
 * The handler table of thin endpoints (provider `stripe-thin`), from the classic Stripe table:
 * `v1.<type>` for every classic `<type>`, claiming its change (change-once.ts) so a classic and a thin
 * event of one change apply once, and the health type, which applies the change it reports and
 * requests an event backfill ({@link recoverThenBackfill}). The worker reads the notification's object
 * from the API and runs these on it; the receiver records every other thin type as `ignored`.
 */
export function thinHandlerTable(classic: HandlerTable): HandlerTable {
  const once = changeOnceTable(classic);
  const v1 = handlerTable(Object.fromEntries(Object.entries(once).map(([type, handler]) => [`v1.${type}`, handler])));
  return handlerTable(v1, { [EVENT_GENERATION_RESOLVED]: recoverThenBackfill(v1) });
}
