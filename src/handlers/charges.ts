import type { Tx } from "../db/db.ts";
import type { HandlerContext } from "./handler-table.ts";
import { lockMoneyKeys } from "./money-ledger.ts";
import { applyRefund } from "./refunds.ts";
import { settleRefunds } from "./settle-refunds.ts";
import { StripeFields } from "./stripe-fields.ts";

/**
 * Records a charge (charge.succeeded, charge.captured, charge.refunded, charge.updated): the charge ↔
 * payment intent link that lets refunds reach their invoice, and the amount and currency its refunds
 * are checked against. Insert-if-absent; a payment intent learnt later fills a missing one, never
 * replaces it. A charge that lists its refunds (`refunds.data`, expanded in older API versions) applies
 * each like a refund event. Then books the refunds of the charge that waited for it and fit, and
 * refuses (PermanentError) any that do not add up with it ({@link settleRefunds}). Books no payment:
 * the payment is booked from its invoice (billing.ts). Must be called inside the inbox transaction.
 * Stripe API reference, "The Charge object".
 */
export async function recordCharge(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const f = new StripeFields(object);
  const charge = {
    id: f.id("id", "ch_") ?? "",
    paymentIntent: f.id("payment_intent", "pi_", true),
    amount: f.amount("amount"),
    currency: f.currency(),
  };
  if (object.object !== undefined && object.object !== "charge") f.bad.push("object");
  const listed = (object.refunds as { data?: unknown } | null | undefined)?.data;
  if (listed !== undefined && !Array.isArray(listed)) f.bad.push("refunds");
  f.check("charge event");
  await lockMoneyKeys(tx, charge.id, charge.paymentIntent, context.account);
  await tx`
    insert into stripe_charges (account, id, payment_intent, amount, currency, event_id)
    values (${context.account ?? ""}::text, ${charge.id}::text, ${charge.paymentIntent}::text, ${charge.amount}::bigint, ${charge.currency}::text,
            ${context.eventId}::text)
    on conflict (account, id) do update
       set payment_intent = excluded.payment_intent
     where stripe_charges.payment_intent is null
       and excluded.payment_intent is not null
  `;
  for (const refund of (listed ?? []) as Record<string, unknown>[]) {
    await applyRefund(tx, typeof refund === "object" && refund !== null ? refund : {}, context);
  }
  await settleRefunds(tx, charge.id, charge.paymentIntent, context);
}
