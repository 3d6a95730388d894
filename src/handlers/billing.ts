import type { Tx } from "../db/db.ts";
import { handlerTable, PermanentError, type Handler, type HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";

/** The fields of a Stripe invoice object that billing uses (Stripe API reference, "The Invoice object"). */
interface InvoiceFields {
  /** The invoice's status as the event carries it (Stripe API reference, "The Invoice object"). */
  status: Status;
  id: string;
  customer: string;
  currency: string;
  /** Minor currency units. */
  amountDue: number;
  /** Minor currency units. */
  amountPaid: number;
  /**
   * Minor currency units paid above amount_due and credited to the customer's balance (API versions
   * from 2025-03-31.basil on; 0 when the event does not carry it). Stripe API reference, "The Invoice
   * object", `amount_overpaid`.
   */
  amountOverpaid: number;
  /**
   * True when the invoice was marked paid outside Stripe (a wire or a cheque recorded by hand):
   * `amount_paid` then counts only what moved through Stripe (Stripe API reference, "The Invoice
   * object", `paid_out_of_band`). False when absent.
   */
  paidOutOfBand: boolean;
  /** Payment attempts Stripe has made (`attempt_count`; 0 when absent). */
  attemptCount: number;
  /** The subscription the invoice bills (`parent.subscription_details.subscription` from API 2025-03-31.basil on, else `subscription`), or null. */
  subscription: string | null;
}

type Status = "draft" | "open" | "uncollectible" | "paid" | "void";
const STATUSES: readonly Status[] = ["draft", "open", "uncollectible", "paid", "void"];

/**
 * Reads and checks the invoice fields; a missing or mistyped one is a PermanentError naming it
 * (never the value). `customer` may be a string id or an expanded object with an id.
 */
export function readInvoice(object: Record<string, unknown>): InvoiceFields {
  const customer =
    typeof object.customer === "object" && object.customer !== null ? (object.customer as { id?: unknown }).id : object.customer;
  const fields = {
    status: object.status,
    id: object.id,
    customer,
    currency: object.currency,
    amountDue: object.amount_due,
    amountPaid: object.amount_paid,
    amountOverpaid: object.amount_overpaid ?? 0,
    paidOutOfBand: object.paid_out_of_band ?? false,
    attemptCount: object.attempt_count ?? 0,
    subscription: invoiceSubscription(object),
  };
  const bad: string[] = [];
  if (object.object !== undefined && object.object !== "invoice") bad.push("object");
  if (typeof fields.id !== "string" || !/^in_[A-Za-z0-9_]{1,250}$/.test(fields.id)) bad.push("id");
  // A payment event books only when its invoice says "paid": an absent or unknown status must not pass
  // as "not paid yet" (that would acknowledge a payment and book nothing).
  if (typeof fields.status !== "string" || !STATUSES.includes(fields.status as Status)) bad.push("status");
  if (typeof fields.customer !== "string" || fields.customer === "" || fields.customer.length > 255) bad.push("customer");
  if (typeof fields.currency !== "string" || !/^[a-z]{3}$/.test(fields.currency)) bad.push("currency");
  if (!Number.isSafeInteger(fields.amountDue) || (fields.amountDue as number) < 0) bad.push("amount_due");
  if (!Number.isSafeInteger(fields.amountPaid) || (fields.amountPaid as number) < 0) bad.push("amount_paid");
  if (!Number.isSafeInteger(fields.amountOverpaid) || (fields.amountOverpaid as number) < 0) bad.push("amount_overpaid");
  if (typeof fields.paidOutOfBand !== "boolean") bad.push("paid_out_of_band");
  if (!Number.isSafeInteger(fields.attemptCount) || (fields.attemptCount as number) < 0) bad.push("attempt_count");
  if (bad.length > 0) throw new PermanentError(`Cannot apply invoice event: missing or invalid field(s) ${bad.join(", ")}`);
  return fields as InvoiceFields;
}

/**
 * The subscription id an invoice names: `parent.subscription_details.subscription` (API versions from
 * 2025-03-31.basil on, Stripe API reference "The Invoice object", `parent`), else the older top-level
 * `subscription`; a string id or an expanded object's `id`. Null when it names none or something that is
 * not a subscription id (Stripe's published example invoice carries the placeholder "subscription"):
 * the link is information, never a reason to refuse the invoice's event.
 */
export function invoiceSubscription(object: Record<string, unknown>): string | null {
  const parent = object.parent as { subscription_details?: { subscription?: unknown } | null } | null | undefined;
  const raw = parent?.subscription_details?.subscription ?? object.subscription ?? null;
  const id = typeof raw === "object" && raw !== null ? (raw as { id?: unknown }).id : raw;
  return typeof id === "string" && /^sub_[A-Za-z0-9_]{1,250}$/.test(id) ? id : null;
}

/**
 * Moves an invoice to `target` if its current status is one of `from`, inserting it at `target`
 * when absent; `from` empty means insert-if-absent only. A later or duplicate event finds the status
 * already past and changes nothing, so the lifecycle only moves forward:
 * draft → open → (uncollectible →) paid | void.
 */
function moveInvoice(target: Status, from: Status[]): Handler {
  return async (tx, object, ctx) => {
    const inv = readInvoice(object);
    await tx`
      insert into invoices (account, id, customer_id, status, currency, amount_due)
      values (${ctx.account ?? ""}::text, ${inv.id}::text, ${inv.customer}::text, ${target}::text, ${inv.currency}::text, ${inv.amountDue}::bigint)
      ${
        from.length === 0
          ? tx`on conflict (account, id) do nothing`
          : tx`
      on conflict (account, id) do update
         set status = excluded.status,
             amount_due = excluded.amount_due,
             updated_at = now()
       where invoices.status = any(${from}::text[])`
      }
    `;
  };
}

/**
 * Marks the invoice paid and books its payment: the upsert moves the invoice to `paid` only from
 * draft/open/uncollectible (never from void, never twice); only a statement that made that move
 * inserts the `payment` ledger entry (`unique (invoice_id, kind)` is the second line of defence) and,
 * only if that insert booked a row, the `InvoicePaymentBooked` outbox row. Concurrent paid events for
 * one invoice serialize on the invoice row lock (ON CONFLICT DO UPDATE). A payment for a void invoice,
 * or in another currency than the invoice's, or of another amount than the one already booked for it,
 * is refused (SQLSTATE 22000: parked as needs-review), never booked and never acknowledged as
 * processed; so is, before any SQL (PermanentError), a paid invoice whose amount_paid is above its
 * amount_due by other than its `amount_overpaid` (an overpayment Stripe reports is booked in full), or
 * below its amount_due (0 included: forgiven, or paid partly outside Stripe) unless the invoice says
 * `paid_out_of_band`: then it moves to paid and books only its amount_paid (none when 0), the part that
 * moved through Stripe. A paid invoice with amount_due and amount_paid 0 (fully
 * discounted) moves to paid and books no ledger row. Seed §5.2 (`_apply_invoice_paid`, whose "void: do not
 * book, hand to reconciliation" this makes visible), with its status re-read folded into RETURNING.
 */
async function bookPayment(tx: Tx, object: Record<string, unknown>, ctx: HandlerContext): Promise<void> {
  const inv = readInvoice(object);
  // A payment event for an invoice that is not fully paid yet (a partial payment, API 2025-03-31 and
  // later) moves nothing and books nothing: the one `payment` entry is booked, with the total
  // amount_paid, by the event that carries the invoice as `paid`.
  if (inv.status !== "paid") return;
  const account = ctx.account ?? "";
  // Money that does not add up is never booked as is, nor dropped: refused, so the event is parked.
  // An overpayment Stripe reports as such (amount_overpaid, credited to the customer's balance) is money
  // that moved: booked as amount_paid. Any other excess is an anomaly.
  if (inv.amountPaid > inv.amountDue && inv.amountPaid - inv.amountDue !== inv.amountOverpaid) {
    throw new PermanentError(
      "Cannot book payment: amount_paid above amount_due on a paid invoice without a matching amount_overpaid: not booked (reconcile by hand)",
    );
  }
  // Marked paid outside Stripe: the invoice is paid, and only what moved through Stripe (amount_paid,
  // often 0) is booked; the rest never reached Stripe, so no Stripe ledger entry may claim it.
  if (inv.amountPaid === 0 && inv.amountDue > 0 && !inv.paidOutOfBand)
    throw new PermanentError(
      "Cannot book payment: amount_paid 0 on a paid invoice with amount_due above 0: not booked (reconcile by hand)",
    );
  // Paid for less than it owes (forgiven, or paid partly outside Stripe without saying so): money that
  // does not add up is shown to an operator, never booked as the payment of the whole invoice.
  if (inv.amountPaid < inv.amountDue && !inv.paidOutOfBand)
    throw new PermanentError(
      "Cannot book payment: amount_paid below amount_due on a paid invoice (forgiven or paid partly outside Stripe?): not booked (reconcile by hand)",
    );
  // One statement: the upsert moves the invoice to paid, the ledger insert books only what that move
  // returned, the outbox insert announces only what the ledger insert booked (each reads the CTE before
  // it through RETURNING: PostgreSQL manual, "Data-Modifying Statements in WITH").
  const payload = { invoice_id: inv.id, amount: inv.amountPaid, currency: inv.currency, event_id: ctx.eventId };
  const named = account === "" ? payload : { ...payload, account }; // a connected account's message names it
  await tx`
    with paid as (
      insert into invoices (account, id, customer_id, status, currency, amount_due, amount_paid, paid_at, subscription_id, attempt_count)
      values (${account}::text, ${inv.id}::text, ${inv.customer}::text, 'paid', ${inv.currency}::text, ${inv.amountDue}::bigint,
              ${inv.amountPaid}::bigint, now(), ${inv.subscription}::text, ${inv.attemptCount}::int)
      on conflict (account, id) do update
         set status = 'paid',
             amount_due = excluded.amount_due,
             amount_paid = excluded.amount_paid,
             paid_at = coalesce(invoices.paid_at, excluded.paid_at),
             -- Paid: dunning is over (dunning.ts records it while the invoice is open).
             subscription_id = coalesce(invoices.subscription_id, excluded.subscription_id),
             attempt_count = greatest(invoices.attempt_count, excluded.attempt_count),
             next_payment_attempt = null,
             dunning = null,
             updated_at = now()
       -- Evaluated on the latest committed row, also one another transaction inserted after this
       -- statement began (ON CONFLICT waits for it): money for a void invoice, in another currency
       -- than the invoice's, or a second payment of another amount than the one booked is never
       -- booked and never silently dropped: the statement fails with a data exception and the event
       -- is parked as needs-review. The same amount again is the same payment: nothing to do. CASE
       -- fixes the evaluation order.
       where case
               when invoices.status = 'void' then webhook_inbox_refuse('Payment event for a void invoice: not booked (refund or reconcile)')
               when invoices.currency <> excluded.currency then webhook_inbox_refuse('Payment currency differs from the invoice currency: not booked')
               when invoices.status = 'paid' and invoices.amount_paid <> excluded.amount_paid
                 then webhook_inbox_refuse('Payment event for a paid invoice: amount_paid differs from the amount already booked: not booked (reconcile by hand)')
               else invoices.status in ('draft', 'open', 'uncollectible')
             end
      returning account, id, amount_paid, currency
    ), booked as (
      -- A fully discounted invoice (amount_due 0, amount_paid 0) is paid with no money moved: no ledger row.
      insert into ledger_entries (account, invoice_id, kind, amount, currency, event_id)
      select account, id, 'payment', amount_paid, currency, ${ctx.eventId}::text
        from paid
       where amount_paid > 0
      on conflict (account, invoice_id, kind) do nothing
      returning 1
    )
    ${insertOutbox(tx, { account, aggregate: ["Invoice", inv.id], eventType: "InvoicePaymentBooked", messageKey: "" }, named, "booked")}
  `;
}

/**
 * The billing handler table (Stripe invoice lifecycle), shared by the receiver and the worker: plain
 * handlers, each one statement. `invoice.paid` and `invoice.payment_succeeded` are two Event objects
 * for one payment: both map to {@link bookPayment}, which books it once. Order is never decided by
 * `created` (Stripe docs, "Event ordering"); each handler is a monotonic transition.
 */
export const billingHandlers = handlerTable({
  "invoice.created": moveInvoice("draft", []),
  "invoice.finalized": moveInvoice("open", ["draft"]),
  "invoice.marked_uncollectible": moveInvoice("uncollectible", ["draft", "open"]),
  "invoice.voided": moveInvoice("void", ["draft", "open", "uncollectible"]),
  "invoice.paid": bookPayment,
  "invoice.payment_succeeded": bookPayment,
});
