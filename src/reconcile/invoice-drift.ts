import type { Db, Tx } from "../db/db.ts";
import { asAccount, type ObjectDrift, type ObjectKind, type StripeObject } from "./object-kind.ts";

/** The fields of a Stripe invoice the comparison reads (Stripe API reference, "The Invoice object"); amounts in minor units. */
export interface StripeInvoiceRow {
  id: string;
  status: string;
  currency: string;
  amount_due: number;
  amount_paid: number;
}

/**
 * How a local invoice differs from Stripe's, one class per invoice (the first that applies, in this
 * order). Repairable through the handlers (a forward move or a missing booking): `missing_locally`,
 * `status_behind`, `payment_missing`. The others need an operator: the handlers never move an invoice
 * backwards, never book twice and never change a booked amount.
 * - `missing_locally`: no local row for the invoice.
 * - `currency_differs`: the local invoice or its booked payment is in another currency than Stripe's.
 * - `booked_but_void`: Stripe says void; locally it is paid or has a booked payment.
 * - `paid_but_void_locally`: Stripe says paid; locally it is void (the handlers refuse the payment).
 * - `payment_amount_differs`: Stripe says paid; the booked payment has another amount than amount_paid.
 * - `payment_missing`: Stripe says paid with amount_paid > 0; no payment is booked locally.
 * - `status_behind`: the local status is earlier in draft → open → uncollectible → paid | void.
 * - `status_ahead`: the local status is later than Stripe's (Stripe never moves an invoice back).
 * - `amount_due_differs`: same status, another amount_due.
 */
export type DriftClass =
  | "missing_locally"
  | "currency_differs"
  | "booked_but_void"
  | "paid_but_void_locally"
  | "payment_amount_differs"
  | "payment_missing"
  | "status_behind"
  | "status_ahead"
  | "amount_due_differs";

/** One drifted invoice: Stripe's side, the local side (null fields when absent) and its class. */
export interface InvoiceDrift extends ObjectDrift {
  drift: DriftClass;
  stripe: { status: string; currency: string; amountDue: number; amountPaid: number };
  local: {
    status: string | null;
    currency: string | null;
    amountDue: number | null;
    amountPaid: number | null;
    /** The booked `payment` ledger entry's amount, null when none is booked. */
    booked: number | null;
  };
}

type Row = {
  id: string;
  drift: DriftClass;
  status: string;
  currency: string;
  amount_due: string;
  amount_paid: string;
  local_status: string | null;
  local_currency: string | null;
  local_amount_due: string | null;
  local_amount_paid: string | null;
  booked: string | null;
};

const num = (v: string | null): number | null => (v === null ? null : Number(v));

/**
 * Compares Stripe's invoices (one list page) with the local `invoices` rows and `payment` ledger
 * entries in one query (the page joined as a jsonb array), and returns the drifted ones in the
 * page's order; invoices in sync are left out. `account` (`""`: the platform) is whose rows the page
 * is compared with: Stripe's objects of one account against that account's rows only. Runs on `db` or inside a transaction (`tx`, which then
 * sees its own writes: a repair re-checks its invoice this way).
 * @throws the database error.
 */
export async function findInvoiceDrift(db: Db | Tx, objects: readonly StripeObject[], account = ""): Promise<InvoiceDrift[]> {
  if (objects.length === 0) return [];
  const invoices = objects.map(invoiceRow);
  const rows = await db<Row[]>`
    with stripe as (
      select e.o ->> 'id' as id, e.o ->> 'status' as status, e.o ->> 'currency' as currency,
             (e.o ->> 'amount_due')::bigint as amount_due, (e.o ->> 'amount_paid')::bigint as amount_paid, e.ordinality,
             case e.o ->> 'status' when 'draft' then 0 when 'open' then 1 when 'uncollectible' then 2 else 3 end as stage
        from jsonb_array_elements(${JSON.stringify(invoices)}::text::jsonb) with ordinality as e(o, ordinality)
    ),
    compared as (
      select s.*, i.id is not null as known,
             i.status as local_status, i.currency as local_currency,
             i.amount_due as local_amount_due, i.amount_paid as local_amount_paid,
             case i.status when 'draft' then 0 when 'open' then 1 when 'uncollectible' then 2 else 3 end as local_stage,
             p.amount as booked, p.currency as booked_currency
        from stripe s
        left join invoices i on i.account = ${account} and i.id = s.id
        left join ledger_entries p on p.account = ${account} and p.invoice_id = s.id and p.kind = 'payment'
    )
    select id, status, currency, amount_due::text, amount_paid::text,
           local_status, local_currency, local_amount_due::text, local_amount_paid::text, booked::text,
           case
             when not known then 'missing_locally'
             when local_currency <> currency or booked_currency <> currency then 'currency_differs'
             when status = 'void' and (local_status = 'paid' or booked is not null) then 'booked_but_void'
             when status = 'paid' and local_status = 'void' then 'paid_but_void_locally'
             when status = 'paid' and booked <> amount_paid then 'payment_amount_differs'
             when status = 'paid' and booked is null and amount_paid > 0 then 'payment_missing'
             when stage > local_stage then 'status_behind'
             when stage < local_stage then 'status_ahead'
             when local_amount_due <> amount_due then 'amount_due_differs'
           end as drift
      from compared
     order by ordinality
  `;
  return rows
    .filter((r) => r.drift !== null)
    .map((r) =>
      withRepairable({
        id: r.id,
        repairable: false,
        drift: r.drift,
        stripe: { status: r.status, currency: r.currency, amountDue: Number(r.amount_due), amountPaid: Number(r.amount_paid) },
        local: {
          status: r.local_status,
          currency: r.local_currency,
          amountDue: num(r.local_amount_due),
          amountPaid: num(r.local_amount_paid),
          booked: num(r.booked),
        },
      }),
    );
}

/**
 * Whether the handlers can repair `drift` by applying Stripe's current invoice: the invoice is absent,
 * or its status or payment is behind Stripe's and the handlers' forward moves reach it (a local `paid`
 * without a booking is not: bookPayment books only on the move to paid).
 */
export function isRepairable(drift: InvoiceDrift): boolean {
  if (drift.drift === "missing_locally" || drift.drift === "status_behind") return true;
  return drift.drift === "payment_missing" && drift.local.status !== "paid";
}

function withRepairable(drift: InvoiceDrift): InvoiceDrift {
  return { ...drift, repairable: isRepairable(drift) };
}

/** The fields of a listed invoice the comparison reads. */
function invoiceRow(o: StripeObject): StripeInvoiceRow {
  return {
    id: o.id,
    status: String(o.status),
    currency: String(o.currency),
    amount_due: Number(o.amount_due ?? 0),
    amount_paid: Number(o.amount_paid ?? 0),
  };
}

/** The event type whose handler moves an invoice to Stripe's `status` (billing.ts). */
const EVENT_FOR_STATUS: Readonly<Record<string, string>> = {
  draft: "invoice.created",
  open: "invoice.finalized",
  uncollectible: "invoice.marked_uncollectible",
  void: "invoice.voided",
  paid: "invoice.paid",
};

/**
 * Invoices (`stripe.invoices.list`). A repair is recorded as `reconcile:<invoice id>:<status>:<amount_paid>`,
 * deterministic in Stripe's state (a later state is a repair of its own), with the type whose
 * handler moves the invoice to Stripe's status; it settles the invoice's needs-review `invoice.*` rows.
 */
export const invoiceKind: ObjectKind = {
  name: "invoices",
  permission: "Invoices: Read",
  list: async (stripe, params, account) =>
    (await stripe.invoices.list(params, asAccount(account))) as unknown as { data: StripeObject[]; has_more: boolean },
  findDrift: findInvoiceDrift,
  repairEvent(object) {
    const row = invoiceRow(object);
    return { key: `reconcile:${row.id}:${row.status}:${row.amount_paid}`, type: EVENT_FOR_STATUS[row.status] ?? `invoice.${row.status}` };
  },
  reviewTypes: ["invoice.%"],
};
