import type { Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import type { HandlerContext } from "./handler-table.ts";
import { bookMoneyOut, lockMoneyKey, type MoneyOutEntry } from "./money-ledger.ts";
import { StripeFields } from "./stripe-fields.ts";

type DisputeStatus =
  "warning_needs_response" | "warning_under_review" | "warning_closed" | "needs_response" | "under_review" | "won" | "lost" | "prevented";
/** Lifecycle order (Stripe API reference, "The Dispute object", `status`); rank 4 is final. */
const RANK: Record<DisputeStatus, number> = {
  warning_needs_response: 0,
  warning_under_review: 1,
  needs_response: 2,
  under_review: 3,
  warning_closed: 4,
  won: 4,
  lost: 4,
  prevented: 4,
};

/**
 * A balance transaction listed by a dispute, in the account's settlement `currency` (minor units):
 * `amount` < 0 withdrawn, > 0 reinstated; `fee` > 0 charged, < 0 returned (Stripe API reference, "The
 * Balance Transaction object": fees are positive when assessed).
 */
interface DisputeTransaction {
  id: string;
  amount: number;
  fee: number;
  currency: string;
}

/** Reads a dispute's listed balance transactions; a bad entry is a PermanentError naming its field. */
function readTransactions(list: unknown): DisputeTransaction[] {
  if (!Array.isArray(list)) throw new PermanentError("Cannot apply dispute event: missing or invalid field(s) balance_transactions");
  return list
    .map((item, i) => {
      const f = new StripeFields(typeof item === "object" && item !== null ? (item as Record<string, unknown>) : {});
      const txn = { id: f.id("id", "txn_") ?? "", amount: f.amount("amount", true), fee: f.amount("fee", true), currency: f.currency() };
      f.check(`dispute event: balance_transactions[${i}]`);
      return txn;
    })
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** What `entriesOf` needs of the dispute (amounts in minor units of its presentment `currency`). */
interface DisputeFacts {
  id: string;
  charge: string;
  paymentIntent: string | null;
  amount: number;
  currency: string;
  status: DisputeStatus;
}

/**
 * The presentment amount of a withdrawal or reinstatement (`txn.amount` ≠ 0): in the dispute's
 * currency, what the customer's money did. Unconverted (the balance transaction is in the dispute's
 * currency), its own amount. Converted by Stripe into the settlement currency, the disputed amount:
 * a withdrawal takes the disputed amount, and a won dispute returns it entirely (Stripe support,
 * "Dispute for full charge amount after a partial refund"). A converted reinstatement of a dispute not
 * won (partly won: lost, the refunded part returned) has no presentment figure in the event: PermanentError.
 */
function presentmentOf(txn: DisputeTransaction, dispute: DisputeFacts): number {
  if (txn.currency === dispute.currency) return Math.abs(txn.amount);
  if (txn.amount < 0 || dispute.status === "won") return dispute.amount;
  throw new PermanentError(
    `Cannot apply dispute ${dispute.id}: balance transaction ${txn.id} reinstates ${txn.amount} ${txn.currency} converted from ${dispute.currency} ` +
      `while the dispute is ${dispute.status}, not won: its amount in ${dispute.currency} is not known: not booked (reconcile by hand)`,
  );
}

/**
 * The ledger entries one balance transaction of a dispute stands for (none for a zero amount and
 * fee): a withdrawal or reinstatement in the dispute's presentment amount ({@link presentmentOf}) with
 * the balance transaction's gross amount as settlement; a fee charged (`fee` > 0) or returned (`fee` <
 * 0) in the balance transaction's currency, the only one it has.
 */
function entriesOf(txn: DisputeTransaction, dispute: DisputeFacts): MoneyOutEntry[] {
  const base = { balanceTransaction: txn.id, sourceId: dispute.id, charge: dispute.charge, paymentIntent: dispute.paymentIntent };
  const entries: MoneyOutEntry[] = [];
  if (txn.amount !== 0) {
    entries.push({
      ...base,
      kind: txn.amount < 0 ? "dispute_withdrawal" : "dispute_reinstatement",
      amount: presentmentOf(txn, dispute),
      currency: dispute.currency,
      settlement: { amount: Math.abs(txn.amount), currency: txn.currency },
    });
  }
  if (txn.fee !== 0) {
    const fee = { amount: Math.abs(txn.fee), currency: txn.currency };
    entries.push({ ...base, ...fee, kind: txn.fee > 0 ? "dispute_fee" : "dispute_fee_reversal", settlement: fee });
  }
  return entries;
}

/**
 * Applies a dispute object (charge.dispute.created, .updated, .closed, .funds_withdrawn,
 * .funds_reinstated): records its status, which only moves forward (a final status never changes; a
 * different final status is refused as needs-review), and books every balance transaction it lists,
 * each once by its txn: a negative amount as `dispute_withdrawal`, a positive one as
 * `dispute_reinstatement` (both in the dispute's presentment amount and currency, the balance
 * transaction's as settlement), a fee as `dispute_fee`, a returned fee (negative) as
 * `dispute_fee_reversal` (amounts stored positive; {@link entriesOf}). Because every event carries all
 * the dispute's transactions so far, a reinstatement that arrives before its withdrawal books both.
 * Then refuses movements that do not add up with the dispute ({@link checkDisputeAddsUp}). Must be
 * called inside the inbox transaction. Throws PermanentError naming a missing or mistyped field, for
 * a converted reinstatement it cannot state in the dispute's currency, or from that check.
 */
export async function applyDispute(tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const f = new StripeFields(object);
  const dispute = {
    id: f.id("id", "dp_") ?? "",
    charge: f.id("charge", "ch_") ?? "",
    paymentIntent: f.id("payment_intent", "pi_", true),
    amount: f.amount("amount"),
    currency: f.currency(),
    status: f.oneOf("status", Object.keys(RANK) as DisputeStatus[]),
  };
  if (object.object !== undefined && object.object !== "dispute") f.bad.push("object");
  f.check("dispute event");
  const entries = readTransactions(object.balance_transactions).flatMap((txn) => entriesOf(txn, dispute));
  const account = context.account ?? "";
  await lockMoneyKey(tx, dispute.id, account);
  await tx`
    insert into disputes (account, id, charge, payment_intent, amount, currency, status, status_rank)
    values (${account}::text, ${dispute.id}::text, ${dispute.charge}::text, ${dispute.paymentIntent}::text, ${dispute.amount}::bigint,
            ${dispute.currency}::text, ${dispute.status}::text, ${RANK[dispute.status]}::smallint)
    on conflict (account, id) do update
       set status = excluded.status,
           status_rank = excluded.status_rank,
           updated_at = now()
     where case
             when disputes.status_rank = 4 and excluded.status_rank = 4 and disputes.status <> excluded.status
               then webhook_inbox_refuse('Dispute ' || disputes.id || ' closed as ' || disputes.status || ', an event says ' || excluded.status || ': not applied (reconcile by hand)')
             else excluded.status_rank > disputes.status_rank
           end
  `;
  for (const entry of entries) await bookMoneyOut(tx, entry, context);
  await checkDisputeAddsUp(tx, dispute.id, account);
}

/**
 * Refuses (PermanentError) when the movements booked for dispute `id` do not add up: withdrawals above
 * the dispute's amount (in its currency: rows booked before presentment amounts were kept may be in
 * another, and are not compared), reinstatements above the withdrawals in their currency, or returned
 * fees above the fees in theirs (what comes back never exceeds what left). Caller holds
 * {@link lockMoneyKey} on the dispute.
 */
async function checkDisputeAddsUp(tx: Tx, id: string, account: string): Promise<void> {
  const rows = await tx<{ currency: string; gone: string; back: string; what: string; amount: string; dispute_currency: string }[]>`
    select l.currency, m.what,
           coalesce(sum(l.amount) filter (where l.kind = m.out_kind), 0)::text as gone,
           coalesce(sum(l.amount) filter (where l.kind = m.back_kind), 0)::text as back,
           d.amount::text as amount, d.currency as dispute_currency
      from disputes d
     cross join (values ('withdrawals', 'dispute_withdrawal', 'dispute_reinstatement'),
                        ('fees', 'dispute_fee', 'dispute_fee_reversal')) m(what, out_kind, back_kind)
      join ledger_entries l on l.account = d.account and l.source_id = d.id and l.kind in (m.out_kind, m.back_kind)
     where d.account = ${account}
       and d.id = ${id}
     group by l.currency, m.what, d.amount, d.currency
  `;
  for (const row of rows) {
    if (row.what === "withdrawals" && row.currency === row.dispute_currency && Number(row.gone) > Number(row.amount)) {
      throw new PermanentError(
        `Cannot apply dispute ${id}: withdrawals total ${row.gone}, above the dispute's ${row.amount} ${row.currency}: not booked (reconcile by hand)`,
      );
    }
    if (Number(row.back) > Number(row.gone)) {
      const back = row.what === "withdrawals" ? "reinstatements" : "returned fees";
      throw new PermanentError(
        `Cannot apply dispute ${id}: ${back} total ${row.back}, above the ${row.what}' ${row.gone} ${row.currency}: not booked (reconcile by hand)`,
      );
    }
  }
}
