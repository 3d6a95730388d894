import type { Tx } from "../db/db.ts";
import { handlerTable, type HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";
import { StripeFields } from "./stripe-fields.ts";

/**
 * Where a Checkout Session stands for fulfilment, by rank: `open` 0 < `awaiting_payment` 1 (completed,
 * a delayed payment method still settling) < `payment_failed` 2 = `expired` 2 < `fulfilled` 3. A
 * session only moves up, so a stale or repeated event changes nothing, and `fulfilled` is final.
 */
export type CheckoutState = "open" | "awaiting_payment" | "payment_failed" | "expired" | "fulfilled";

/** The rank of each state; the SQL below spells the same ranks. */
const RANK: Readonly<Record<CheckoutState, number>> = { open: 0, awaiting_payment: 1, payment_failed: 2, expired: 2, fulfilled: 3 };

/**
 * The fulfilment state a Checkout Session object shows for `eventType`, following Stripe's docs
 * "Fulfill orders" and the Checkout Session object (`status` open | complete | expired,
 * `payment_status` paid | unpaid | no_payment_required): a complete session that is paid, or needs no
 * payment, is to be fulfilled; complete and unpaid is waiting for a delayed payment
 * (`checkout.session.async_payment_succeeded` or `_failed` follows), except on the failed event itself,
 * where unpaid is final; expired sessions were never paid.
 */
export function checkoutState(status: string, paymentStatus: string, eventType: string): CheckoutState {
  if (status === "expired") return "expired";
  if (status === "open") return "open";
  if (paymentStatus === "paid" || paymentStatus === "no_payment_required") return "fulfilled";
  return eventType === "checkout.session.async_payment_failed" ? "payment_failed" : "awaiting_payment";
}

/**
 * Applies a Checkout Session event (`checkout.session.completed`, `.async_payment_succeeded`,
 * `.async_payment_failed`, `.expired`): upserts the `checkout_sessions` row under (account, id),
 * moving its state only up its rank ({@link CheckoutState}); only the statement that moved it to
 * `fulfilled` inserts the `checkout_fulfilments` row (primary key (account, session_id): the second line
 * of defence) and, only if that insert did, one `CheckoutSessionFulfilled` outbox message. So a
 * session is fulfilled exactly once whatever the order and the copies: async_payment_succeeded before
 * completed fulfils once, async_payment_failed after a fulfilment changes nothing. Amounts are minor
 * units. Must be called inside the inbox transaction.
 * @throws PermanentError naming a missing or mistyped field (never its value).
 */
export async function applyCheckoutSession(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const f = new StripeFields(object);
  const id = f.id("id", "cs_") ?? "";
  const status = f.oneOf("status", ["open", "complete", "expired"] as const);
  const paymentStatus = f.oneOf("payment_status", ["paid", "unpaid", "no_payment_required"] as const);
  const amountTotal = object.amount_total === null || object.amount_total === undefined ? null : f.amount("amount_total");
  const currency = object.currency === null || object.currency === undefined ? null : f.currency();
  const customer = f.id("customer", "cus_", true);
  const mode = typeof object.mode === "string" ? object.mode : null;
  if (object.object !== undefined && object.object !== "checkout.session") f.bad.push("object");
  f.check("checkout session event");
  const state = checkoutState(status, paymentStatus, context.eventType);
  const account = context.account ?? "";
  const payload = { account, session_id: id, amount_total: amountTotal, currency, event_id: context.eventId };
  await tx`
    with moved as (
      insert into checkout_sessions (account, id, state, mode, payment_status, amount_total, currency, customer_id, event_id)
      values (${account}::text, ${id}::text, ${state}::text, ${mode}::text, ${paymentStatus}::text, ${amountTotal}::bigint,
              ${currency}::text, ${customer}::text, ${context.eventId}::text)
      on conflict (account, id) do update
         set state = excluded.state,
             payment_status = excluded.payment_status,
             amount_total = excluded.amount_total,
             currency = excluded.currency,
             customer_id = coalesce(excluded.customer_id, checkout_sessions.customer_id),
             event_id = excluded.event_id,
             updated_at = now()
       where case checkout_sessions.state when 'open' then 0 when 'awaiting_payment' then 1 when 'fulfilled' then 3 else 2 end
             < ${RANK[state]}::int
      returning account, id, state, amount_total, currency
    ), fulfilled as (
      insert into checkout_fulfilments (account, session_id, amount_total, currency, event_id)
      select account, id, amount_total, currency, ${context.eventId}::text
        from moved
       where state = 'fulfilled'
      on conflict (account, session_id) do nothing
      returning 1
    )
    ${insertOutbox(tx, { account, aggregate: ["CheckoutSession", id], eventType: "CheckoutSessionFulfilled", messageKey: "" }, payload, "fulfilled")}
  `;
}

/** Checkout fulfilment, by Stripe event type: the four Checkout Session events, one handler. */
export const checkoutHandlers = handlerTable({
  "checkout.session.completed": applyCheckoutSession,
  "checkout.session.async_payment_succeeded": applyCheckoutSession,
  "checkout.session.async_payment_failed": applyCheckoutSession,
  "checkout.session.expired": applyCheckoutSession,
});
