import type { Tx } from "../db/db.ts";
import type { HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";

/**
 * A ledger kind for money going out, or coming back after it went out (a failed refund's reversal, a
 * dispute's reinstatement, a returned dispute fee); amounts are ≥ 0, the kind gives the direction.
 */
export type MoneyOutKind =
  "refund" | "refund_reversal" | "dispute_withdrawal" | "dispute_fee" | "dispute_fee_reversal" | "dispute_reinstatement";

/** The outbox message each kind announces, and the aggregate it belongs to. */
const MESSAGES: Record<MoneyOutKind, { aggregate: string; eventType: string }> = {
  refund: { aggregate: "Refund", eventType: "RefundBooked" },
  refund_reversal: { aggregate: "Refund", eventType: "RefundReversed" },
  dispute_withdrawal: { aggregate: "Dispute", eventType: "DisputeFundsWithdrawn" },
  dispute_fee: { aggregate: "Dispute", eventType: "DisputeFeeBooked" },
  dispute_fee_reversal: { aggregate: "Dispute", eventType: "DisputeFeeReturned" },
  dispute_reinstatement: { aggregate: "Dispute", eventType: "DisputeFundsReinstated" },
};

/** One money movement to book: a Stripe balance transaction (txn_…) and what it did. */
export interface MoneyOutEntry {
  kind: MoneyOutKind;
  /**
   * Minor units of `currency`, > 0: the presentment amount (the customer's and the invoice's money),
   * or for a fee kind the fee in the currency Stripe charged it in.
   */
  amount: number;
  currency: string;
  /** What the balance transaction moved in the Stripe balance (≥ 0, minor units), when the event carries it; else null. */
  settlement: { amount: number; currency: string } | null;
  /** txn_…: with `kind`, the business key. */
  balanceTransaction: string;
  /** re_… or dp_…: the refund or dispute that moved the money (the outbox aggregate id). */
  sourceId: string;
  charge: string | null;
  paymentIntent: string | null;
}

/**
 * Books `entry` once and, only when this call inserted the ledger row, queues its outbox message
 * (RefundBooked, RefundReversed, DisputeFundsWithdrawn, DisputeFeeBooked, DisputeFeeReturned or
 * DisputeFundsReinstated) in the same statement. Must be called inside the inbox transaction. Returns
 * true if it booked the row, false if (balance_transaction, kind) was already booked with the same
 * amount, currency and source (and settlement, where both know it). The same key booked with another
 * is money that does not add up: the statement fails with SQLSTATE 22000 (webhook_inbox_refuse) and
 * the event is parked as needs-review.
 */
export async function bookMoneyOut(tx: Tx, entry: MoneyOutEntry, context: HandlerContext): Promise<boolean> {
  const account = context.account ?? "";
  const { aggregate, eventType } = MESSAGES[entry.kind];
  const { kind, amount, currency, charge } = entry;
  const settled = { settlement_amount: entry.settlement?.amount ?? null, settlement_currency: entry.settlement?.currency ?? null };
  const ids = { balance_transaction: entry.balanceTransaction, source_id: entry.sourceId, charge, payment_intent: entry.paymentIntent };
  const payload = { kind, amount, currency, ...settled, ...ids, event_id: context.eventId };
  const named = account === "" ? payload : { ...payload, account }; // a connected account's message names it
  const rows = await tx`
    with booked as (
      insert into ledger_entries (account, kind, amount, currency, settlement_amount, settlement_currency, balance_transaction,
                                  payment_intent, charge, source_id, event_id)
      values (${account}::text, ${entry.kind}::text, ${entry.amount}::bigint, ${entry.currency}::text, ${entry.settlement?.amount ?? null}::bigint,
              ${entry.settlement?.currency ?? null}::text, ${entry.balanceTransaction}::text,
              ${entry.paymentIntent}::text, ${entry.charge}::text, ${entry.sourceId}::text, ${context.eventId}::text)
      on conflict (account, balance_transaction, kind) where kind <> 'payment' do update
         set amount = ledger_entries.amount
       -- Never updates: the same movement again is nothing to do; a different one under the same key
       -- is refused. CASE fixes the evaluation order.
       where case
               when ledger_entries.amount <> excluded.amount
                 or ledger_entries.currency <> excluded.currency
                 or ledger_entries.source_id <> excluded.source_id
                 -- A settlement one side does not know is not a difference (a refund names its
                 -- balance transaction by id unless expanded).
                 or ledger_entries.settlement_amount <> excluded.settlement_amount
                 or ledger_entries.settlement_currency <> excluded.settlement_currency
                 then webhook_inbox_refuse('Money-out event differs from the ' || excluded.kind || ' already booked for balance transaction ' || excluded.balance_transaction || ': not booked (reconcile by hand)')
               else false
             end
      returning 1
    )
    -- The ledger's own key tells the messages of one source apart.
    ${insertOutbox(tx, { account, aggregate: [aggregate, entry.sourceId], eventType, messageKey: entry.balanceTransaction }, named, "booked")}
  `;
  return rows.length > 0;
}

/**
 * Serializes, until the end of the inbox transaction, every money-out handler working on `key` (a
 * charge, payment intent or dispute id) of `account` (`""`: the platform's own), so checks that read
 * several rows (refunds against their charge) see each other's writes. PostgreSQL manual, "Advisory Locks".
 */
export async function lockMoneyKey(tx: Tx, key: string, account = ""): Promise<void> {
  await tx`select pg_advisory_xact_lock(hashtextextended(${`money-out:${account}:${key}`}::text, 0))`;
}

/**
 * Takes {@link lockMoneyKey} on a charge, then on a payment intent (either may be null), always in
 * that order so two handlers never wait on each other. Refunds, charges and invoice payments take it,
 * so a refund and the charge or invoice payment it is checked against see each other's writes.
 */
export async function lockMoneyKeys(tx: Tx, charge: string | null, paymentIntent: string | null, account = ""): Promise<void> {
  if (charge !== null) await lockMoneyKey(tx, charge, account);
  if (paymentIntent !== null) await lockMoneyKey(tx, paymentIntent, account);
}
