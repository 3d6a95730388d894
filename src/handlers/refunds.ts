import type { Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import type { HandlerContext } from "./handler-table.ts";
import { bookMoneyOut, lockMoneyKeys } from "./money-ledger.ts";
import { StripeFields } from "./stripe-fields.ts";

type RefundStatus = "pending" | "requires_action" | "succeeded" | "failed" | "canceled";
/** Lifecycle order (Stripe API reference, "The Refund object", `status`): a status never moves back. */
const RANK: Record<RefundStatus, number> = { pending: 0, requires_action: 0, succeeded: 1, failed: 2, canceled: 2 };

/** The fields of a Stripe refund object that money-out uses (amounts in minor units). */
export interface RefundFields {
  id: string;
  charge: string | null;
  paymentIntent: string | null;
  amount: number;
  currency: string;
  status: RefundStatus;
  /** txn_… of the money that left; absent while nothing moved. */
  balanceTransaction: string | null;
  /** txn_… that gave the money back after the refund failed. */
  failureBalanceTransaction: string | null;
}

/** Reads and checks a refund object; a missing or mistyped field is a PermanentError naming it. */
export function readRefund(object: Record<string, unknown>): RefundFields {
  const f = new StripeFields(object);
  const refund = {
    id: f.id("id", "re_") ?? "",
    charge: f.id("charge", "ch_", true),
    paymentIntent: f.id("payment_intent", "pi_", true),
    amount: f.amount("amount"),
    currency: f.currency(),
    status: f.oneOf("status", Object.keys(RANK) as RefundStatus[]),
    balanceTransaction: f.id("balance_transaction", "txn_", true),
    failureBalanceTransaction: f.id("failure_balance_transaction", "txn_", true),
  };
  if (object.object !== undefined && object.object !== "refund") f.bad.push("object");
  if (refund.charge === null && refund.paymentIntent === null && !f.bad.length) f.bad.push("charge");
  f.check("refund event");
  return refund;
}

/**
 * Applies a refund object (refund.created, refund.updated, refund.failed, charge.refund.updated, or a
 * refund listed in a charge): records it in `refunds` as a fact (status only moves forward; the
 * balance transaction is learnt once) and then books what can be checked ({@link settleRefunds}).
 * The refund id is a business key: an event naming another amount, currency or balance transaction
 * than the refund already recorded is a PermanentError, so a refund is booked at most once. A succeeded
 * refund without a balance transaction is a PermanentError (money moved that cannot be keyed). A
 * refund that failed or was canceled after money moved (it carries a balance transaction or a
 * `failure_balance_transaction`) is not booked as a reversal: PermanentError, parked for an operator
 * to reconcile (the refund booked by its earlier succeeded event stays). Must be called inside the
 * inbox transaction.
 */
export async function applyRefund(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const refund = readRefund(object);
  await lockMoneyKeys(tx, refund.charge, refund.paymentIntent);
  const ended = refund.status === "failed" || refund.status === "canceled";
  if (ended && (refund.balanceTransaction !== null || refund.failureBalanceTransaction !== null)) {
    throw new PermanentError(
      `Cannot apply refund ${refund.id}: it is ${refund.status} after money moved (balance transaction ${refund.failureBalanceTransaction ?? refund.balanceTransaction}): not booked (reconcile by hand)`,
    );
  }
  // Money moved but nothing names the movement: it cannot be booked once, and must not be dropped.
  if (refund.status === "succeeded" && refund.balanceTransaction === null && refund.amount > 0) {
    throw new PermanentError(`Cannot apply refund ${refund.id}: succeeded without a balance transaction: not booked (reconcile by hand)`);
  }
  const [known] = await tx<{ amount: string; currency: string; balance_transaction: string | null }[]>`
    select amount::text, currency, balance_transaction from refunds where id = ${refund.id}
  `;
  if (known !== undefined) {
    const other =
      Number(known.amount) !== refund.amount || known.currency !== refund.currency
        ? `${refund.amount} ${refund.currency} where ${known.amount} ${known.currency} is recorded`
        : known.balance_transaction !== null &&
            refund.balanceTransaction !== null &&
            known.balance_transaction !== refund.balanceTransaction
          ? `balance transaction ${refund.balanceTransaction} where ${known.balance_transaction} is recorded`
          : null;
    if (other !== null)
      throw new PermanentError(`Cannot apply refund ${refund.id}: the event says ${other}: not booked (reconcile by hand)`);
  }
  await tx`
    insert into refunds (id, charge, payment_intent, amount, currency, status, status_rank, balance_transaction)
    values (${refund.id}::text, ${refund.charge}::text, ${refund.paymentIntent}::text, ${refund.amount}::bigint,
            ${refund.currency}::text, ${refund.status}::text, ${RANK[refund.status]}::smallint, ${refund.balanceTransaction}::text)
    on conflict (id) do update
       set status = case when excluded.status_rank > refunds.status_rank then excluded.status else refunds.status end,
           status_rank = greatest(refunds.status_rank, excluded.status_rank),
           balance_transaction = coalesce(refunds.balance_transaction, excluded.balance_transaction),
           updated_at = now()
     where excluded.status_rank > refunds.status_rank
        or (refunds.balance_transaction is null and excluded.balance_transaction is not null)
  `;
  await settleRefunds(tx, refund.charge, refund.paymentIntent, context);
}

/** A refund recorded in `refunds` whose money moved and is not booked yet (amounts in minor units). */
interface DueRefund {
  id: string;
  charge: string | null;
  payment_intent: string | null;
  amount: string;
  currency: string;
  balance_transaction: string;
}

/** What a refund is checked against: its charge if recorded, else its payment intent's invoice payments. */
interface RefundLimit {
  /** "charge ch_…" or "invoice payment of pi_…", for the error message. */
  what: string;
  amount: number;
  /** null when the invoice payments of one payment intent disagree on the currency. */
  currency: string | null;
  /** Refunds already booked against the same limit. */
  booked: number;
}

/** The limit `refund` is checked against, or null while neither its charge nor its invoice payment is known. */
async function limitOf(tx: Tx, refund: DueRefund): Promise<RefundLimit | null> {
  if (refund.charge !== null) {
    const [charge] = await tx<{ amount: string; currency: string; booked: string }[]>`
      select c.amount::text, c.currency,
             (select coalesce(sum(l.amount), 0) from ledger_entries l where l.kind = 'refund' and l.charge = c.id)::text as booked
        from stripe_charges c
       where c.id = ${refund.charge}
    `;
    if (charge !== undefined)
      return { what: `charge ${refund.charge}`, amount: Number(charge.amount), currency: charge.currency, booked: Number(charge.booked) };
  }
  const [paid] = await tx<{ amount: string | null; currency: string | null; booked: string }[]>`
    select sum(ip.amount_paid)::text as amount,
           case when min(ip.currency) = max(ip.currency) then min(ip.currency) end as currency,
           (select coalesce(sum(l.amount), 0)
              from ledger_entries l
             where l.kind = 'refund'
               and (l.payment_intent = ${refund.payment_intent}::text
                    or l.charge = ${refund.charge}::text
                    or l.charge in (select c.id from stripe_charges c where c.payment_intent = ${refund.payment_intent}::text)))::text as booked
      from invoice_payments ip
     where ip.payment_intent = ${refund.payment_intent}::text
        or ip.charge = ${refund.charge}::text
  `;
  if (paid?.amount == null) return null;
  return {
    what: `the invoice payment of ${refund.payment_intent ?? refund.charge}`,
    amount: Number(paid.amount),
    currency: paid.currency,
    booked: Number(paid.booked),
  };
}

/**
 * Books every refund of `charge` or `paymentIntent` (a refund names either or both; a charge links its
 * payment intent) whose money moved (a balance transaction recorded, whatever its status since) and
 * that is not booked yet, in refund id order, each checked first against what is known: its charge
 * (amount, currency) if recorded, else the invoice payments of its payment intent. A refund neither
 * is known for stays recorded and unbooked: the charge or invoice payment event that arrives later
 * calls this and books it then, so no order books unchecked money. A refund in another currency, or
 * one that takes the refunds above the amount, is a PermanentError: the event that completes the
 * contradiction is parked and nothing it would book is booked. Then checks the charge still adds up
 * ({@link checkChargeAddsUp}). Caller holds {@link lockMoneyKeys} on the same charge and payment intent.
 */
export async function settleRefunds(tx: Tx, charge: string | null, paymentIntent: string | null, context: HandlerContext): Promise<void> {
  const due = await tx<DueRefund[]>`
    select r.id, r.charge, r.payment_intent, r.amount::text, r.currency, r.balance_transaction
      from refunds r
     where (r.charge = ${charge}::text
            or r.payment_intent = ${paymentIntent}::text
            or r.charge in (select c.id from stripe_charges c where c.payment_intent = ${paymentIntent}::text))
       -- A recorded balance transaction came from an event where money moved (a failed or canceled one
       -- carrying it is refused), so a later failed status without one does not unbook it in any order.
       and r.balance_transaction is not null
       and r.amount > 0
       and not exists (select 1 from ledger_entries l where l.kind = 'refund' and l.source_id = r.id)
     order by r.id
  `;
  for (const refund of due) {
    const limit = await limitOf(tx, refund);
    if (limit === null) continue;
    if (limit.currency !== refund.currency) {
      throw new PermanentError(
        `Cannot book refund ${refund.id}: ${refund.currency}, but ${limit.what} is in ${limit.currency ?? "several currencies"}: not booked (reconcile by hand)`,
      );
    }
    if (limit.booked + Number(refund.amount) > limit.amount) {
      throw new PermanentError(
        `Cannot book refund ${refund.id}: refunds would total ${limit.booked + Number(refund.amount)}, above ${limit.what}'s ${limit.amount} ${limit.currency}: not booked (reconcile by hand)`,
      );
    }
    await bookMoneyOut(
      tx,
      {
        kind: "refund",
        amount: Number(refund.amount),
        currency: refund.currency,
        balanceTransaction: refund.balance_transaction,
        sourceId: refund.id,
        charge: refund.charge,
        paymentIntent: refund.payment_intent,
      },
      context,
    );
  }
  if (charge !== null) await checkChargeAddsUp(tx, charge);
}

/**
 * Refuses (PermanentError) when the refunds booked against `charge` do not add up with the charge as
 * recorded: a refund in another currency than the charge's, or refunds above the charge's amount
 * (refunds booked against the invoice payment before the charge arrived). Does nothing while the
 * charge is unknown. Caller holds {@link lockMoneyKeys} on the charge.
 */
export async function checkChargeAddsUp(tx: Tx, charge: string): Promise<void> {
  const [row] = await tx<{ other_currency: boolean; over: boolean; refunded: string; amount: string; currency: string }[]>`
    select coalesce(bool_or(l.currency <> c.currency), false) as other_currency,
           coalesce(sum(l.amount), 0) > c.amount as over,
           coalesce(sum(l.amount), 0)::text as refunded,
           c.amount::text as amount,
           c.currency
      from stripe_charges c
      left join ledger_entries l on l.charge = c.id and l.kind = 'refund'
     where c.id = ${charge}
     group by c.id
  `;
  if (row?.other_currency)
    throw new PermanentError(
      `Cannot book refunds of charge ${charge}: a refund is in another currency than the charge's (${row.currency}): not booked (reconcile by hand)`,
    );
  if (row?.over)
    throw new PermanentError(
      `Cannot book refunds of charge ${charge}: refunds total ${row.refunded}, above the charge's ${row.amount} ${row.currency}: not booked (reconcile by hand)`,
    );
}
