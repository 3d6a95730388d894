import type { Tx } from "../db/db.ts";
import { readInvoice } from "./billing.ts";
import { handlerTable, PermanentError, type HandlerContext } from "./handler-table.ts";

/**
 * The dunning state a failed collection attempt leaves on its invoice: `payment_failed`
 * (`invoice.payment_failed`: the attempt was declined) or `action_required`
 * (`invoice.payment_action_required`: the customer must authenticate, e.g. 3D Secure). Stripe sends
 * both for one attempt that needs authentication; `action_required` ranks above `payment_failed` for
 * the same attempt, so the invoice says what the customer has to do whichever came first.
 */
export type Dunning = "payment_failed" | "action_required";

/**
 * Records a failed or blocked collection attempt on the invoice billing.ts keeps (Stripe docs
 * "Automate payment retries" / "Subscription webhooks", `invoice.payment_failed` and
 * `invoice.payment_action_required`): `attempt_count`, `next_payment_attempt` (Unix s → timestamptz, null
 * when Stripe will not retry) and `dunning`, and the subscription the invoice bills. Books no money and
 * writes no outbox message. Monotonic: the invoice row changes only while it is draft, open or
 * uncollectible (a paid or void invoice is past dunning; the paid move clears it, billing.ts) and only
 * when (attempt_count, dunning rank) is at least the stored one, so a stale attempt never overwrites a
 * later one; an invoice not seen yet is inserted with the event's status. An event whose invoice is no
 * longer open or uncollectible (refetch mode reads the current invoice: already paid or voided)
 * records nothing: its payment or void event applies that. Must be called inside the inbox transaction.
 * @throws PermanentError naming a missing or mistyped field (readInvoice, or next_payment_attempt).
 */
export async function recordDunning(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const inv = readInvoice(object);
  const raw = object.next_payment_attempt ?? null;
  const next = typeof raw === "number" ? raw : null;
  if (raw !== null && (next === null || !Number.isSafeInteger(next) || next < 0))
    throw new PermanentError("Cannot apply invoice event: missing or invalid field(s) next_payment_attempt");
  if (inv.status !== "open" && inv.status !== "uncollectible") return;
  const dunning: Dunning = context.eventType === "invoice.payment_action_required" ? "action_required" : "payment_failed";
  await tx`
    insert into invoices (account, id, customer_id, status, currency, amount_due, subscription_id, attempt_count, next_payment_attempt, dunning)
    values (${context.account ?? ""}::text, ${inv.id}::text, ${inv.customer}::text, ${inv.status}::text, ${inv.currency}::text, ${inv.amountDue}::bigint,
            ${inv.subscription}::text, ${inv.attemptCount}::int, to_timestamp(${next}::bigint), ${dunning}::text)
    on conflict (account, id) do update
       set attempt_count = excluded.attempt_count,
           next_payment_attempt = excluded.next_payment_attempt,
           dunning = excluded.dunning,
           subscription_id = coalesce(invoices.subscription_id, excluded.subscription_id),
           updated_at = now()
     where invoices.status in ('draft', 'open', 'uncollectible')
       and (excluded.attempt_count, case excluded.dunning when 'action_required' then 2 else 1 end)
           >= (invoices.attempt_count, case invoices.dunning when 'action_required' then 2 when 'payment_failed' then 1 else 0 end)
       -- The same state again (a replay, the sibling event of one attempt) changes no row, not even updated_at.
       and (excluded.attempt_count, excluded.next_payment_attempt, excluded.dunning, coalesce(invoices.subscription_id, excluded.subscription_id))
           is distinct from (invoices.attempt_count, invoices.next_payment_attempt, invoices.dunning, invoices.subscription_id)
  `;
}

/** Dunning, by Stripe event type: failed and blocked invoice payments, recorded, never booked. */
export const dunningHandlers = handlerTable({
  "invoice.payment_failed": recordDunning,
  "invoice.payment_action_required": recordDunning,
});
