import type { Tx } from "../db/db.ts";
import { handlerTable, type Handler, type HandlerContext, type HandlerTable } from "./handler-table.ts";

/**
 * Wraps a Stripe handler so that each Stripe change is applied once, whichever of its events comes
 * first: the classic event (its own id is the change) or a thin event for the same change (its
 * `snapshot_event`, passed as `context.changeId`). In the same transaction the run first claims the
 * change in `stripe_change_claims` (sql/0015_thin_events.sql, `on conflict do nothing`), then runs
 * `handler` only when it claimed it; the event is settled either way. The unique key serializes
 * concurrent claims like the inbox key does; a run that rolls back releases its claim.
 */
export function changeOnce(handler: Handler): Handler {
  return async (tx, object, context) => {
    if (await claimChange(tx, context)) await handler(tx, object, context);
  };
}

/**
 * Claims the change of `context` in `stripe_change_claims`; true when this transaction claimed it
 * (apply), false when another event of the same change already did, or (a thin event) its classic
 * event is settled as processed in the inbox under any Stripe endpoint (classic events applied before
 * any thin endpoint existed claimed nothing). Must run inside the inbox transaction.
 */
export async function claimChange(tx: Tx, context: HandlerContext): Promise<boolean> {
  const change = context.changeId ?? context.eventId;
  const rows = await tx`
    insert into stripe_change_claims (account, change_id, provider, endpoint, event_id)
    select ${context.account ?? ""}::text, ${change}::text, ${context.provider}::text, ${context.endpoint}::text, ${context.eventId}::text
     where ${change}::text = ${context.eventId}::text
        or not exists (select 1 from webhook_inbox where provider = 'stripe' and event_id = ${change}::text and outcome = 'processed')
    on conflict (account, change_id) do nothing
    returning 1
  `;
  return rows.length === 1;
}

/** {@link changeOnce} over every handler of `table`. */
export function changeOnceTable(table: HandlerTable): HandlerTable {
  return handlerTable(Object.fromEntries(Object.entries(table).map(([type, handler]) => [type, changeOnce(handler)])));
}
