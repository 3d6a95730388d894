import type { Db, Tx } from "../db/db.ts";
import { asAccount, type ObjectDrift, type ObjectKind, type StripeObject } from "./object-kind.ts";

/**
 * How a local refund differs from Stripe's (the first that applies, in this order). Repairable by
 * applying Stripe's refund through `applyRefund`: `missing_locally`, `status_behind`,
 * `transaction_missing`. The others need an operator.
 * - `missing_locally`: no row in `refunds`.
 * - `amount_differs`: the recorded refund has another amount or currency than Stripe's.
 * - `booked_but_failed`: Stripe says canceled, or failed without naming the failure balance transaction
 *   that returned the money; a refund is booked locally.
 * - `booking_differs`: the booked refund (or its reversal) has another amount or balance transaction
 *   than Stripe's (or its failure balance transaction).
 * - `status_behind` / `status_ahead`: the local status is earlier / later in
 *   pending → succeeded → failed | canceled.
 * - `transaction_missing`: Stripe names the balance transaction (or the failure balance transaction);
 *   the local row does not know it yet.
 * - `not_booked`: money moved (a balance transaction, not canceled, and not failed unless its money
 *   came back) and nothing is booked: the refund waits for its charge or invoice payment, which never
 *   arrived (`reconcile events`, or by hand).
 */
export type RefundDriftClass =
  | "missing_locally"
  | "amount_differs"
  | "booked_but_failed"
  | "booking_differs"
  | "status_behind"
  | "status_ahead"
  | "transaction_missing"
  | "not_booked";

const REPAIRABLE: readonly string[] = ["missing_locally", "status_behind", "transaction_missing"];

type Row = {
  id: string;
  drift: RefundDriftClass | null;
  status: string;
  amount: string;
  currency: string;
  btx: string | null;
  fbtx: string | null;
  local_status: string | null;
  local_amount: string | null;
  local_currency: string | null;
  local_btx: string | null;
  local_fbtx: string | null;
  booked: string | null;
};

/** A refund's `balance_transaction` (or another id field), given as an id or as an expanded object. */
function idOf(value: unknown): string | null {
  if (typeof value === "string") return value;
  if (typeof value === "object" && value !== null && typeof (value as { id?: unknown }).id === "string")
    return (value as { id: string }).id;
  return null;
}

/**
 * Compares Stripe's refunds (one list page) with `refunds` and the `refund` ledger entries (by
 * `source_id`) in one query; returns the drifted ones in the page's order. On a transaction it sees
 * that transaction's writes. `account` (`""`: the platform): the account whose rows are compared.
 * @throws the database error.
 */
export async function findRefundDrift(db: Db | Tx, objects: readonly StripeObject[], account = ""): Promise<ObjectDrift[]> {
  if (objects.length === 0) return [];
  const page = objects.map((o) => ({
    id: o.id,
    status: o.status,
    amount: o.amount,
    currency: o.currency,
    btx: idOf(o.balance_transaction),
    fbtx: idOf(o.failure_balance_transaction),
  }));
  const rows = await db<Row[]>`
    with stripe as (
      select e.o ->> 'id' as id, e.o ->> 'status' as status, (e.o ->> 'amount')::bigint as amount,
             e.o ->> 'currency' as currency, e.o ->> 'btx' as btx, e.o ->> 'fbtx' as fbtx, e.ordinality,
             case e.o ->> 'status' when 'succeeded' then 1 when 'failed' then 2 when 'canceled' then 2 else 0 end as stage
        from jsonb_array_elements(${JSON.stringify(page)}::text::jsonb) with ordinality as e(o, ordinality)
    ),
    compared as (
      select s.*, r.id is not null as known, r.status as local_status, r.status_rank as local_stage,
             r.amount as local_amount, r.currency as local_currency, r.balance_transaction as local_btx,
             r.failure_balance_transaction as local_fbtx,
             l.amount as booked, l.balance_transaction as booked_btx,
             v.amount as reversed, v.balance_transaction as reversed_btx
        from stripe s
        left join refunds r on r.account = ${account} and r.id = s.id
        left join ledger_entries l on l.account = ${account} and l.kind = 'refund' and l.source_id = s.id
        left join ledger_entries v on v.account = ${account} and v.kind = 'refund_reversal' and v.source_id = s.id
    )
    select id, status, amount::text, currency, btx, fbtx, local_status, local_amount::text, local_currency, local_btx, local_fbtx,
           booked::text,
           case
             when not known then 'missing_locally'
             when local_amount <> amount or local_currency <> currency then 'amount_differs'
             when booked is not null and (status = 'canceled' or (status = 'failed' and fbtx is null)) then 'booked_but_failed'
             when booked is not null and (booked <> amount or booked_btx is distinct from btx) then 'booking_differs'
             when reversed is not null and (reversed <> amount or reversed_btx is distinct from fbtx) then 'booking_differs'
             when stage > local_stage then 'status_behind'
             when stage < local_stage then 'status_ahead'
             when btx is not null and local_btx is null then 'transaction_missing'
             when fbtx is not null and local_fbtx is null then 'transaction_missing'
             when btx is not null and amount > 0 and booked is null and (status not in ('failed', 'canceled') or fbtx is not null)
               then 'not_booked'
           end as drift
      from compared
     order by ordinality
  `;
  return rows
    .filter((r): r is Row & { drift: RefundDriftClass } => r.drift !== null)
    .map((r) => ({
      id: r.id,
      drift: r.drift,
      repairable: REPAIRABLE.includes(r.drift),
      stripe: {
        status: r.status,
        amount: Number(r.amount),
        currency: r.currency,
        balanceTransaction: r.btx,
        failureBalanceTransaction: r.fbtx,
      },
      local: {
        status: r.local_status,
        amount: r.local_amount === null ? null : Number(r.local_amount),
        currency: r.local_currency,
        balanceTransaction: r.local_btx,
        failureBalanceTransaction: r.local_fbtx,
        booked: r.booked === null ? null : Number(r.booked),
      },
    }));
}

/**
 * Refunds (`stripe.refunds.list`). A repair is recorded as `reconcile:<refund id>:<status>:<balance
 * transaction or none>` with type `refund.updated` (`refund.failed` for a failed one), applied by
 * `applyRefund`; it settles the refund's needs-review `refund.*` and `charge.refund.updated` rows.
 */
export const refundKind: ObjectKind = {
  name: "refunds",
  permission: "Refunds: Read",
  list: async (stripe, params, account) =>
    (await stripe.refunds.list(params, asAccount(account))) as unknown as { data: StripeObject[]; has_more: boolean },
  findDrift: findRefundDrift,
  repairEvent(object) {
    const status = String(object.status);
    return {
      key: `reconcile:${object.id}:${status}:${idOf(object.balance_transaction) ?? "none"}`,
      type: status === "failed" ? "refund.failed" : "refund.updated",
    };
  },
  reviewTypes: ["refund.%", "charge.refund.updated"],
};
