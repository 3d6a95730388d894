import type { Db, Tx } from "../db/db.ts";
import { asAccount, type ObjectDrift, type ObjectKind, type StripeObject } from "./object-kind.ts";

/**
 * How a local dispute differs from Stripe's (the first that applies, in this order). Repairable by
 * applying Stripe's dispute through `applyDispute`: `missing_locally`, `status_behind`,
 * `transactions_missing`. The others need an operator.
 * - `missing_locally`: no row in `disputes`.
 * - `amount_differs`: the recorded dispute has another amount or currency than Stripe's.
 * - `final_status_differs`: both closed, with another final status (won locally, lost in Stripe).
 * - `booking_differs`: a movement booked for the dispute moved another amount than Stripe's balance
 *   transaction says (its settlement figure), or is not among them.
 * - `status_behind` / `status_ahead`: earlier / later in warning_… → needs_response → under_review → closed.
 * - `transactions_missing`: a withdrawal, fee, returned fee or reinstatement Stripe lists is not booked.
 */
export type DisputeDriftClass =
  | "missing_locally"
  | "amount_differs"
  | "final_status_differs"
  | "booking_differs"
  | "status_behind"
  | "transactions_missing"
  | "status_ahead";

const REPAIRABLE: readonly string[] = ["missing_locally", "status_behind", "transactions_missing"];

type Row = {
  id: string;
  drift: DisputeDriftClass | null;
  status: string;
  amount: string;
  currency: string;
  listed: number;
  local_status: string | null;
  local_amount: string | null;
  local_currency: string | null;
  missing: number;
  differs: number;
  extra: number;
};

/** A dispute's balance transactions as the comparison reads them (amount < 0 withdrawn, > 0 reinstated, fee > 0 charged, < 0 returned; minor units). */
function transactionsOf(o: StripeObject): { id: unknown; amount: unknown; fee: unknown }[] {
  const list = Array.isArray(o.balance_transactions) ? (o.balance_transactions as Record<string, unknown>[]) : [];
  return list.map((t) => ({ id: t?.id, amount: t?.amount, fee: t?.fee }));
}

/**
 * Compares Stripe's disputes (one list page) with `disputes` and the ledger entries their balance
 * transactions stand for (withdrawal, reinstatement, fee, keyed by `(balance_transaction, kind)`) in
 * one query; returns the drifted ones in the page's order. On a transaction it sees its writes.
 * `account` (`""`: the platform): the account whose rows are compared.
 * @throws the database error.
 */
export async function findDisputeDrift(db: Db | Tx, objects: readonly StripeObject[], account = ""): Promise<ObjectDrift[]> {
  if (objects.length === 0) return [];
  const page = objects.map((o) => ({ id: o.id, status: o.status, amount: o.amount, currency: o.currency, txns: transactionsOf(o) }));
  const rows = await db<Row[]>`
    with stripe as (
      select e.o ->> 'id' as id, e.o ->> 'status' as status, (e.o ->> 'amount')::bigint as amount,
             e.o ->> 'currency' as currency, e.o -> 'txns' as txns, e.ordinality,
             case e.o ->> 'status'
               when 'warning_needs_response' then 0 when 'warning_under_review' then 1
               when 'needs_response' then 2 when 'under_review' then 3 else 4
             end as stage
        from jsonb_array_elements(${JSON.stringify(page)}::text::jsonb) with ordinality as e(o, ordinality)
    ),
    expected as (
      select s.id, t ->> 'id' as txn, k.kind, k.amount
        from stripe s
       cross join jsonb_array_elements(s.txns) t
       cross join lateral (values ('dispute_withdrawal', -(t ->> 'amount')::bigint),
                                  ('dispute_reinstatement', (t ->> 'amount')::bigint),
                                  ('dispute_fee', (t ->> 'fee')::bigint),
                                  ('dispute_fee_reversal', -(t ->> 'fee')::bigint)) k(kind, amount)
       where k.amount > 0
    ),
    entries as (
      select s.id,
             (select count(*) from expected x
               where x.id = s.id
                 and not exists (select 1 from ledger_entries l
                                  where l.account = ${account} and l.balance_transaction = x.txn and l.kind = x.kind))::int as missing,
             -- Stripe's figures are the balance transaction's: compare what the row says it moved.
             (select count(*) from expected x
                join ledger_entries l on l.account = ${account} and l.balance_transaction = x.txn and l.kind = x.kind
               where x.id = s.id and coalesce(l.settlement_amount, l.amount) <> x.amount)::int as differs,
             (select count(*) from ledger_entries l
               where l.account = ${account}
                 and l.source_id = s.id
                 and l.kind in ('dispute_withdrawal', 'dispute_reinstatement', 'dispute_fee', 'dispute_fee_reversal')
                 and not exists (select 1 from expected x where x.id = s.id and x.txn = l.balance_transaction and x.kind = l.kind))::int as extra
        from stripe s
    )
    select s.id, s.status, s.amount::text, s.currency, jsonb_array_length(s.txns) as listed,
           d.status as local_status, d.amount::text as local_amount, d.currency as local_currency,
           e.missing, e.differs, e.extra,
           case
             when d.id is null then 'missing_locally'
             when d.amount <> s.amount or d.currency <> s.currency then 'amount_differs'
             when s.stage = 4 and d.status_rank = 4 and d.status <> s.status then 'final_status_differs'
             when e.differs > 0 or e.extra > 0 then 'booking_differs'
             when s.stage > d.status_rank then 'status_behind'
             when e.missing > 0 then 'transactions_missing'
             when s.stage < d.status_rank then 'status_ahead'
           end as drift
      from stripe s
      join entries e on e.id = s.id
      left join disputes d on d.account = ${account} and d.id = s.id
     order by s.ordinality
  `;
  return rows
    .filter((r): r is Row & { drift: DisputeDriftClass } => r.drift !== null)
    .map((r) => ({
      id: r.id,
      drift: r.drift,
      repairable: REPAIRABLE.includes(r.drift),
      stripe: { status: r.status, amount: Number(r.amount), currency: r.currency, transactions: r.listed },
      local: {
        status: r.local_status,
        amount: r.local_amount === null ? null : Number(r.local_amount),
        currency: r.local_currency,
        movementsMissing: r.missing,
        movementsDiffering: r.differs + r.extra,
      },
    }));
}

/**
 * Disputes (`stripe.disputes.list`). A repair is recorded as `reconcile:<dispute id>:<status>:<number of
 * balance transactions>` (a dispute only gains transactions) with type `charge.dispute.updated`
 * (`charge.dispute.closed` once closed), applied by `applyDispute`; it settles the dispute's
 * needs-review `charge.dispute.*` rows.
 */
export const disputeKind: ObjectKind = {
  name: "disputes",
  permission: "Disputes: Read",
  list: async (stripe, params, account) =>
    (await stripe.disputes.list(params, asAccount(account))) as unknown as { data: StripeObject[]; has_more: boolean },
  findDrift: findDisputeDrift,
  repairEvent(object) {
    const status = String(object.status);
    const closed = ["won", "lost", "warning_closed", "prevented"].includes(status);
    return {
      key: `reconcile:${object.id}:${status}:${transactionsOf(object).length}`,
      type: closed ? "charge.dispute.closed" : "charge.dispute.updated",
    };
  },
  reviewTypes: ["charge.dispute.%"],
};
