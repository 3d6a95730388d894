import type { Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import type { HandlerContext } from "./handler-table.ts";
import { lockMoneyKeys } from "./money-ledger.ts";
import { settleRefunds } from "./settle-refunds.ts";
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
