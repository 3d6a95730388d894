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
 * balance transaction and the failure balance transaction are each learnt once) and then books what
 * can be checked ({@link settleRefunds}). The refund id is a business key: an event naming another
 * amount, currency, balance transaction or failure balance transaction than the refund already
 * recorded is a PermanentError, so a refund is booked, and reversed, at most once. A refund that failed
 * after its money left carries a `failure_balance_transaction`, the movement that returned the money
 * (Stripe API reference, "The Refund object"): the refund is booked and then reversed by it, whichever
 * of its events arrives first. PermanentError, parked for an operator to reconcile: a succeeded refund
 * without a balance transaction (money moved that cannot be keyed), a failed one that names a balance
 * transaction but no failure balance transaction (money left and nothing says it came back), a
 * canceled one after money moved, and a failure balance transaction on a refund not failed. Must be
 * called inside the inbox transaction.
 */
export async function applyRefund(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const refund = readRefund(object);
  const account = context.account ?? "";
  await lockMoneyKeys(tx, refund.charge, refund.paymentIntent, account);
  const problem = contradictionOf(refund);
  if (problem !== null) throw new PermanentError(`Cannot apply refund ${refund.id}: ${problem}: not booked (reconcile by hand)`);
  const [known] = await tx<
    { amount: string; currency: string; balance_transaction: string | null; failure_balance_transaction: string | null }[]
  >`
    select amount::text, currency, balance_transaction, failure_balance_transaction from refunds where account = ${account} and id = ${refund.id}
  `;
  if (known !== undefined) {
    const other =
      Number(known.amount) !== refund.amount || known.currency !== refund.currency
        ? `${refund.amount} ${refund.currency} where ${known.amount} ${known.currency} is recorded`
        : differs(known.balance_transaction, refund.balanceTransaction)
          ? `balance transaction ${refund.balanceTransaction} where ${known.balance_transaction} is recorded`
          : differs(known.failure_balance_transaction, refund.failureBalanceTransaction)
            ? `failure balance transaction ${refund.failureBalanceTransaction} where ${known.failure_balance_transaction} is recorded`
            : null;
    if (other !== null)
      throw new PermanentError(`Cannot apply refund ${refund.id}: the event says ${other}: not booked (reconcile by hand)`);
  }
  await tx`
    insert into refunds (account, id, charge, payment_intent, amount, currency, status, status_rank, balance_transaction, failure_balance_transaction)
    values (${account}::text, ${refund.id}::text, ${refund.charge}::text, ${refund.paymentIntent}::text, ${refund.amount}::bigint,
            ${refund.currency}::text, ${refund.status}::text, ${RANK[refund.status]}::smallint, ${refund.balanceTransaction}::text,
            ${refund.failureBalanceTransaction}::text)
    on conflict (account, id) do update
       set status = case when excluded.status_rank > refunds.status_rank then excluded.status else refunds.status end,
           status_rank = greatest(refunds.status_rank, excluded.status_rank),
           balance_transaction = coalesce(refunds.balance_transaction, excluded.balance_transaction),
           failure_balance_transaction = coalesce(refunds.failure_balance_transaction, excluded.failure_balance_transaction),
           updated_at = now()
     where excluded.status_rank > refunds.status_rank
        or (refunds.balance_transaction is null and excluded.balance_transaction is not null)
        or (refunds.failure_balance_transaction is null and excluded.failure_balance_transaction is not null)
  `;
  await settleRefunds(tx, refund.charge, refund.paymentIntent, context);
}

/** True when both name a balance transaction and not the same one. */
function differs(recorded: string | null, named: string | null): boolean {
  return recorded !== null && named !== null && recorded !== named;
}

/** What makes a refund event's money impossible to book as it says (for the error message), or null. */
function contradictionOf(refund: RefundFields): string | null {
  const { status, balanceTransaction: moved, failureBalanceTransaction: returned } = refund;
  if (returned !== null && status !== "failed") return `it is ${status} with a failure balance transaction (${returned})`;
  if (status === "canceled" && moved !== null) return `it is canceled after money moved (balance transaction ${moved})`;
  if (status === "failed" && moved !== null && returned === null)
    return `it failed after money moved (balance transaction ${moved}) and names no failure balance transaction that returned it`;
  // Money moved but nothing names the movement: it cannot be booked once, and must not be dropped.
  if (status === "succeeded" && moved === null && refund.amount > 0) return "succeeded without a balance transaction";
  return null;
}
