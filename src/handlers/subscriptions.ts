import type { Tx } from "../db/db.ts";
import { keyIs } from "../inbox/inbox.ts";
import { handlerTable, type HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";
import { StripeFields } from "./stripe-fields.ts";

/** A subscription's `status` (Stripe API reference, "The Subscription object"). */
export type SubscriptionStatus =
  "incomplete" | "incomplete_expired" | "trialing" | "active" | "past_due" | "unpaid" | "paused" | "canceled";

/**
 * How terminal each status is, for states of one subscription carried by events of the same second
 * (Stripe's `created` has one-second resolution, and one change emits several events in that second):
 * the more terminal state wins the tie. canceled and incomplete_expired are final in Stripe (nothing
 * moves a subscription out of them), so they also stop every later change.
 */
export const STATUS_RANK: Readonly<Record<SubscriptionStatus, number>> = {
  incomplete: 0,
  trialing: 1,
  active: 2,
  past_due: 3,
  unpaid: 4,
  paused: 5,
  canceled: 6,
  incomplete_expired: 6,
};

/** Statuses under which the customer has access: trialing, active, and past_due (Stripe is still retrying). */
const ACCESS: readonly SubscriptionStatus[] = ["trialing", "active", "past_due"];

/** The fields of a subscription the table keeps; times are Unix seconds or null. */
export interface SubscriptionFields {
  id: string;
  customer: string;
  status: SubscriptionStatus;
  currentPeriodStart: number | null;
  currentPeriodEnd: number | null;
  cancelAtPeriodEnd: boolean;
  canceledAt: number | null;
  endedAt: number | null;
  trialEnd: number | null;
}

/**
 * Reads a subscription object. The current period is read from the subscription items (API versions
 * from 2025-03-31.basil on: `items.data[].current_period_start/end`; the earliest start and the latest
 * end across items) or, on older versions, from the subscription itself.
 * @throws PermanentError naming every missing or mistyped field (never a value).
 */
export function readSubscription(object: Record<string, unknown>): SubscriptionFields {
  const f = new StripeFields(object);
  const time = (value: unknown, field: string): number | null => {
    if (value === null || value === undefined) return null;
    if (!Number.isSafeInteger(value) || (value as number) < 0) f.bad.push(field);
    return value as number;
  };
  const items = (object.items as { data?: unknown } | null | undefined)?.data;
  const periods = Array.isArray(items) ? (items as Record<string, unknown>[]) : [];
  const starts = periods.map((i) => time(i?.current_period_start, "items.data.current_period_start")).filter((t) => t !== null);
  const ends = periods.map((i) => time(i?.current_period_end, "items.data.current_period_end")).filter((t) => t !== null);
  const fields: SubscriptionFields = {
    id: f.id("id", "sub_") ?? "",
    customer: f.id("customer", "cus_") ?? "",
    status: f.oneOf("status", Object.keys(STATUS_RANK) as SubscriptionStatus[]),
    currentPeriodStart: starts.length > 0 ? Math.min(...starts) : time(object.current_period_start, "current_period_start"),
    currentPeriodEnd: ends.length > 0 ? Math.max(...ends) : time(object.current_period_end, "current_period_end"),
    cancelAtPeriodEnd: object.cancel_at_period_end === true,
    canceledAt: time(object.canceled_at, "canceled_at"),
    endedAt: time(object.ended_at, "ended_at"),
    trialEnd: time(object.trial_end, "trial_end"),
  };
  if (object.object !== undefined && object.object !== "subscription") f.bad.push("object");
  if (object.cancel_at_period_end !== undefined && typeof object.cancel_at_period_end !== "boolean") f.bad.push("cancel_at_period_end");
  f.check("subscription event");
  return fields;
}

/**
 * True when the handler was given the object as the Stripe API returned it, not the event's copy: the
 * worker passes `changeId` exactly for rows whose object it read from the API (thin rows and classic rows
 * of refetch endpoints, worker/process-claim.ts), and for no other caller.
 */
export function readFromApi(context: HandlerContext): boolean {
  return context.changeId !== undefined;
}

/**
 * Applies a `customer.subscription.*` event (created, updated, deleted, paused, resumed,
 * trial_will_end) to the `subscriptions` row under (account, id), ordered by (as_of, status rank):
 * `as_of` is the event's `created` (Unix s, read from its inbox row's `event_created_at`; the time of this
 * transaction when the sender gave none), or, for an object read from the API
 * (refetch mode), the time of this transaction, since that object is Stripe's state after every event
 * created before the read. A state is applied only when its key is at least the stored one, and never
 * once the row is canceled or incomplete_expired; so a stale event never moves the status backwards,
 * and a same-second tie goes to the more terminal status ({@link STATUS_RANK}), or in refetch mode to
 * Stripe's current state. When an applied state changes access (trialing, active and past_due have it),
 * one outbox message says so: `SubscriptionAccessStarted` or `SubscriptionAccessEnded`. Messages of one
 * subscription alternate and the last one matches the row; an access change hidden by a later state
 * that arrived first is not announced. Must be called inside the inbox transaction.
 * @throws PermanentError naming a missing or mistyped field.
 */
export async function applySubscription(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const sub = readSubscription(object);
  const account = context.account ?? "";
  const rank = STATUS_RANK[sub.status];
  const access = ACCESS.includes(sub.status);
  const [key] = await tx<{ as_of: string }[]>`
    select case when ${readFromApi(context)}::boolean then extract(epoch from statement_timestamp())
                else coalesce((select extract(epoch from event_created_at)
                                 from webhook_inbox
                                where ${keyIs(tx, context)}),
                              extract(epoch from statement_timestamp()))
           end as as_of
  `;
  const asOf = key?.as_of ?? "0";
  const values = tx`
    (${account}::text, ${sub.id}::text, ${sub.customer}::text, ${sub.status}::text, ${access}::boolean,
     to_timestamp(${sub.currentPeriodStart}::bigint), to_timestamp(${sub.currentPeriodEnd}::bigint), ${sub.cancelAtPeriodEnd}::boolean,
     to_timestamp(${sub.canceledAt}::bigint), to_timestamp(${sub.endedAt}::bigint), to_timestamp(${sub.trialEnd}::bigint),
     ${asOf}::numeric, ${rank}::int, ${context.eventId}::text)
  `;
  const inserted = await tx`
    insert into subscriptions (account, id, customer_id, status, has_access, current_period_start, current_period_end,
                               cancel_at_period_end, canceled_at, ended_at, trial_end, as_of, status_rank, event_id)
    values ${values}
    on conflict (account, id) do nothing
    returning 1
  `;
  if (inserted.length === 1) {
    if (access) await announce(tx, account, sub, true, context);
    return;
  }
  // The row exists (a concurrent insert has committed: ON CONFLICT DO NOTHING waited for it): lock it,
  // so the access it had is the one this update replaces.
  const [before] = await tx<{ has_access: boolean }[]>`
    select has_access from subscriptions where (account, id) = (${account}, ${sub.id}) for update
  `;
  const moved = await tx`
    update subscriptions
       set customer_id = ${sub.customer},
           status = ${sub.status},
           has_access = ${access},
           current_period_start = to_timestamp(${sub.currentPeriodStart}::bigint),
           current_period_end = to_timestamp(${sub.currentPeriodEnd}::bigint),
           cancel_at_period_end = ${sub.cancelAtPeriodEnd},
           canceled_at = to_timestamp(${sub.canceledAt}::bigint),
           ended_at = to_timestamp(${sub.endedAt}::bigint),
           trial_end = to_timestamp(${sub.trialEnd}::bigint),
           as_of = ${asOf}::numeric,
           status_rank = ${rank},
           event_id = ${context.eventId},
           updated_at = now()
     where (account, id) = (${account}, ${sub.id})
       and status not in ('canceled', 'incomplete_expired')
       and (${asOf}::numeric, ${rank}::int) >= (as_of, status_rank)
       -- The same state again (a replay, a sibling event of one change) changes no row, not even updated_at.
       and (customer_id, status, current_period_start, current_period_end, cancel_at_period_end, canceled_at, ended_at, trial_end, as_of)
           is distinct from (${sub.customer}::text, ${sub.status}::text, to_timestamp(${sub.currentPeriodStart}::bigint),
                             to_timestamp(${sub.currentPeriodEnd}::bigint), ${sub.cancelAtPeriodEnd}::boolean, to_timestamp(${sub.canceledAt}::bigint),
                             to_timestamp(${sub.endedAt}::bigint), to_timestamp(${sub.trialEnd}::bigint), ${asOf}::numeric)
    returning 1
  `;
  if (moved.length === 1 && before && before.has_access !== access) await announce(tx, account, sub, access, context);
}

/** Writes the outbox message of an access change: started (`access`) or ended. */
async function announce(tx: Tx, account: string, sub: SubscriptionFields, access: boolean, context: HandlerContext): Promise<void> {
  const payload = { account, subscription_id: sub.id, customer_id: sub.customer, status: sub.status, event_id: context.eventId };
  const eventType = access ? "SubscriptionAccessStarted" : "SubscriptionAccessEnded";
  // Access can start and end more than once: the event that moved it tells the messages apart
  // (`<account>/` as before 0028, so the platform's message ids stay those already sent).
  await insertOutbox(tx, { account, aggregate: ["Subscription", sub.id], eventType, messageKey: `${account}/${context.eventId}` }, payload);
}

/** Subscriptions, by Stripe event type: every `customer.subscription.*` lifecycle event, one handler. */
export const subscriptionHandlers = handlerTable({
  "customer.subscription.created": applySubscription,
  "customer.subscription.updated": applySubscription,
  "customer.subscription.deleted": applySubscription,
  "customer.subscription.paused": applySubscription,
  "customer.subscription.resumed": applySubscription,
  "customer.subscription.trial_will_end": applySubscription,
});
