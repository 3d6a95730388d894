import type { Tx } from "../db/db.ts";
import type { HandlerContext } from "./handler-table.ts";
import { lockMoneyKeys } from "./money-ledger.ts";
import { settleRefunds } from "./settle-refunds.ts";
import { StripeFields } from "./stripe-fields.ts";

/**
 * Records which payment paid which invoice (invoice_payment.paid; Stripe API reference, "The Invoice
 * Payment object"): `payment` is `{ type: "payment_intent", payment_intent }` or `{ type: "charge",
 * charge }`, each a string id or an expanded object. Insert-if-absent by the invoice payment id; the
 * link is read by the view ledger_entries_linked, so refunds and disputes booked before it arrived are
 * linked too. Books no payment (the payment is booked from its invoice, billing.ts); books the refunds
 * of the payment that waited for it and fit, and refuses (PermanentError) any that do not
 * ({@link settleRefunds}). Must be called inside the inbox transaction. Throws PermanentError naming a
 * missing or mistyped field.
 */
export async function recordInvoicePayment(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const f = new StripeFields(object);
  const payment = typeof object.payment === "object" && object.payment !== null ? (object.payment as Record<string, unknown>) : {};
  const p = new StripeFields(payment);
  const row = {
    id: f.id("id", "inpay_") ?? "",
    invoice: f.id("invoice", "in_") ?? "",
    amountPaid: f.amount("amount_paid"),
    currency: f.currency(),
    paymentIntent: p.id("payment_intent", "pi_", true),
    charge: p.id("charge", "ch_", true),
  };
  if (object.object !== undefined && object.object !== "invoice_payment") f.bad.push("object");
  if (p.bad.length > 0 || (row.paymentIntent === null && row.charge === null)) f.bad.push("payment");
  f.check("invoice payment event");
  await lockMoneyKeys(tx, row.charge, row.paymentIntent, context.account);
  await tx`
    insert into invoice_payments (account, id, invoice_id, payment_intent, charge, amount_paid, currency, event_id)
    values (${context.account ?? ""}::text, ${row.id}::text, ${row.invoice}::text, ${row.paymentIntent}::text, ${row.charge}::text,
            ${row.amountPaid}::bigint, ${row.currency}::text, ${context.eventId}::text)
    on conflict (account, id) do nothing
  `;
  await settleRefunds(tx, row.charge, row.paymentIntent, context);
}
