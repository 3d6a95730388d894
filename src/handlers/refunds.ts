import type { Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import type { HandlerContext } from "./handler-table.ts";
import { bookMoneyOut, lockMoneyKey } from "./money-ledger.ts";
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
 * refund listed in a charge): records its status, which only moves forward, and books its money once,
 * keyed by its balance transaction, when money moved (a balance transaction and a status other than
 * failed or canceled). A pending or failed refund without a balance transaction books nothing; a
 * succeeded one without it is a PermanentError (money moved that cannot be keyed). A
 * refund that failed or was canceled after money moved (it carries a balance transaction or a
 * `failure_balance_transaction`) is not booked as a reversal: PermanentError, parked for an operator
 * to reconcile (the refund booked by its earlier succeeded event stays). Then checks the charge still
 * adds up ({@link checkChargeAddsUp}). Must be called inside the inbox transaction.
 */
export async function applyRefund(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const refund = readRefund(object);
  await lockMoneyKey(tx, refund.charge ?? refund.paymentIntent ?? refund.id);
  const ended = refund.status === "failed" || refund.status === "canceled";
  if (ended && (refund.balanceTransaction !== null || refund.failureBalanceTransaction !== null)) {
    throw new PermanentError(`Cannot apply refund ${refund.id}: it is ${refund.status} after money moved (balance transaction ${refund.failureBalanceTransaction ?? refund.balanceTransaction}): not booked (reconcile by hand)`);
  }
  // Money moved but nothing names the movement: it cannot be booked once, and must not be dropped.
  if (refund.status === "succeeded" && refund.balanceTransaction === null && refund.amount > 0) {
    throw new PermanentError(`Cannot apply refund ${refund.id}: succeeded without a balance transaction: not booked (reconcile by hand)`);
  }
  await tx`
    insert into refunds (id, charge, payment_intent, amount, currency, status, status_rank, balance_transaction)
    values (${refund.id}::text, ${refund.charge}::text, ${refund.paymentIntent}::text, ${refund.amount}::bigint,
            ${refund.currency}::text, ${refund.status}::text, ${RANK[refund.status]}::smallint, ${refund.balanceTransaction}::text)
    on conflict (id) do update
       set status = excluded.status,
           status_rank = excluded.status_rank,
           balance_transaction = coalesce(refunds.balance_transaction, excluded.balance_transaction),
           updated_at = now()
     where excluded.status_rank > refunds.status_rank
  `;
  if (refund.balanceTransaction !== null && !ended && refund.amount > 0) {
    await bookMoneyOut(tx, {
      kind: "refund",
      amount: refund.amount,
      currency: refund.currency,
      balanceTransaction: refund.balanceTransaction,
      sourceId: refund.id,
      charge: refund.charge,
      paymentIntent: refund.paymentIntent,
    }, context);
  }
  if (refund.charge !== null) await checkChargeAddsUp(tx, refund.charge);
}

/**
 * Refuses (PermanentError) when the refunds booked against `charge` do not add up with the charge as
 * recorded: a refund in another currency than the charge's, or refunds above the charge's amount.
 * Does nothing while the charge is unknown (its charge event runs this check when it arrives, so
 * either order parks the event that completes the contradiction). Caller holds {@link lockMoneyKey}
 * on the charge.
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
  if (row?.other_currency) throw new PermanentError(`Cannot book refunds of charge ${charge}: a refund is in another currency than the charge's (${row.currency}): not booked (reconcile by hand)`);
  if (row?.over) throw new PermanentError(`Cannot book refunds of charge ${charge}: refunds total ${row.refunded}, above the charge's ${row.amount} ${row.currency}: not booked (reconcile by hand)`);
}
