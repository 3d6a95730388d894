import type { Db, Tx } from "../db/db.ts";
import { statementHandler, type Handler, type HandlerContext, type HandlerTable } from "./handler-table.ts";

/** The change a handler run applies: the thin event's snapshot event, else the event itself. */
function changeOf(context: HandlerContext): string {
  return context.changeId ?? context.eventId;
}

/**
 * Wraps a Stripe handler so that each Stripe change is applied once, whichever of its events comes
 * first: the classic event (its own id is the change) or a thin event for the same change (its
 * `snapshot_event`, passed as `context.changeId`). The run first inserts the change into
 * `stripe_change_claims` (sql/0015_thin_events.sql) in the same transaction, `on conflict do nothing`; when the change
 * was already claimed, the business steps do nothing and the event is still settled. The unique key
 * serializes concurrent claims like the inbox key does; a run that rolls back releases its claim.
 * A statement handler stays one statement: the claim is one more step, and the handler's own steps see
 * a gate that is also false when the claim found the change taken (the Stripe steps all test the
 * gate). A plain handler gets one more statement before it.
 */
export function changeOnce(name: string, handler: Handler): Handler {
  if (CHANGE_ONCE in handler) return handler;
  const steps = handler.steps;
  if (steps) {
    const wrapped = statementHandler(name, (sql, object, context, helpers) => ({
      change_claim: sql`
        insert into stripe_change_claims (change_id, provider, endpoint, event_id)
        select ${changeOf(context)}::text, ${context.provider}::text, ${context.endpoint}::text, ${context.eventId}::text
         where ${helpers.gate} ${classicNotSettled(sql, context)}
        on conflict (change_id) do nothing
        returning 1
      `,
      ...steps(sql, object, context, {
        step: helpers.step,
        gate: sql`(${helpers.gate} and exists (select 1 from ${helpers.step("change_claim")}))`,
      }),
    }));
    return Object.assign(wrapped, { [CHANGE_ONCE]: true });
  }
  const wrapped = async (tx: Tx, object: Record<string, unknown>, context: HandlerContext) => {
    if (await claimChange(tx, context)) await handler(tx, object, context);
  };
  return Object.assign(wrapped, { [CHANGE_ONCE]: true });
}

/** Marks a handler {@link changeOnce} made, so wrapping it again returns it as it is (a second claim would find the first). */
const CHANGE_ONCE = Symbol("changeOnce");

/**
 * For a thin event (its change is another event's): also false when the classic event of the change is
 * settled as processed in the inbox under any Stripe endpoint. Classic events applied before any thin
 * endpoint existed claimed nothing; this finds them.
 */
function classicNotSettled(sql: Db | Tx, context: HandlerContext) {
  if (context.changeId === undefined || context.changeId === context.eventId) return sql``;
  return sql`and not exists (select 1 from webhook_inbox where provider = 'stripe' and event_id = ${context.changeId}::text and outcome = 'processed')`;
}

/**
 * Claims the change of `context` in `stripe_change_claims`; true when this transaction claimed it (apply),
 * false when another event of the same change already did, or (thin event) its classic event is settled
 * as processed (apply nothing). Must run inside the inbox transaction.
 */
export async function claimChange(tx: Tx, context: HandlerContext): Promise<boolean> {
  const rows = await tx`
    insert into stripe_change_claims (change_id, provider, endpoint, event_id)
    select ${changeOf(context)}::text, ${context.provider}::text, ${context.endpoint}::text, ${context.eventId}::text
     where true ${classicNotSettled(tx, context)}
    on conflict (change_id) do nothing
    returning 1
  `;
  return rows.length === 1;
}

/** {@link changeOnce} over every handler of `table`, named after its event type. */
export function changeOnceTable(table: HandlerTable): HandlerTable {
  return Object.fromEntries(Object.entries(table).map(([type, handler]) => [type, changeOnce(`changeOnce ${type}`, handler)]));
}
