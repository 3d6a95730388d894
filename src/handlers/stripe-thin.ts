import type { Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import { recordBackfillRequest } from "./backfill-requests.ts";
import { EVENT_GENERATION_RESOLVED } from "../providers/stripe-thin.ts";
import { changeOnceTable } from "./change-once.ts";
import { handlerTable, type HandlerContext, type HandlerTable } from "./handler-table.ts";

/** How far before `resolved_at` a health window starts when the event names no start: 24 h, in ms. */
export const HEALTH_LOOKBACK_MS = 24 * 3_600_000;

/** A window of event creation times to backfill, from a health notification. */
export interface BackfillWindow {
  start: Date;
  end: Date;
}

/**
 * The window a `v2.core.health.event_generation_failure.resolved` event reports: `data.resolved_at`
 * (else the event's `created`) as its end; `data.started_at` or `data.impact.started_at` as its start,
 * else the end minus `lookbackMs` (a wider window costs API reads, never a double effect: backfilled
 * events go through the inbox key like any other).
 * @throws PermanentError when no end can be read.
 */
export function healthWindow(event: Record<string, unknown>, lookbackMs = HEALTH_LOOKBACK_MS): BackfillWindow {
  const data = (event.data ?? {}) as Record<string, unknown>;
  const impact = (data.impact ?? {}) as Record<string, unknown>;
  const time = (v: unknown): Date | undefined => {
    if (typeof v !== "string") return undefined;
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? undefined : d;
  };
  const end = time(data.resolved_at) ?? time(event.created);
  if (!end) throw new PermanentError("Cannot read the health event's window: no resolved_at and no created time");
  const start = time(data.started_at) ?? time(impact.started_at) ?? new Date(end.getTime() - lookbackMs);
  return { start: start <= end ? start : end, end };
}

/**
 * The handler of the health notification (applied by the worker to the full event it fetched, see
 * worker/stripe-fetch.ts): records a request to backfill the window Stripe failed to create events
 * for, once per notification, in the notification's transaction (the event backfill serves it:
 * reconcile/catch-up.ts `runBackfillRequests`).
 */
async function requestBackfill(tx: Tx, event: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const window = healthWindow(event);
  await recordBackfillRequest(tx, { endpoint: context.endpoint, requestedBy: context.eventId, start: window.start, end: window.end });
}

/**
 * The handler table of thin endpoints (provider `stripe-thin`), from the classic Stripe table:
 * `v1.<type>` for every classic `<type>`, claiming its change (change-once.ts) so a classic and a thin
 * event of one change apply once, and the health type that requests an event backfill. The worker
 * reads the notification's object from the API and runs these on it; the receiver records every other
 * thin type as `ignored`.
 */
export function thinHandlerTable(classic: HandlerTable): HandlerTable {
  const once = changeOnceTable(classic);
  return handlerTable(Object.fromEntries(Object.entries(once).map(([type, handler]) => [`v1.${type}`, handler])), {
    [EVENT_GENERATION_RESOLVED]: requestBackfill,
  });
}
