// Edge file: the seed's inbox and outbox tables for the bench's naive peer (naive-peer.ts) and pgbench's
// seed script (scripts.ts seedSyncScript): one inbox row per event with its payload in it, keyed by the
// seed's (provider, endpoint, event_id), as sql/0001 was (with the seed's available_at and attempts for the
// naive worker, naive-worker.ts), and a plain outbox. Tables of their own, so the
// peer stays the seed's SQL whatever shape ours take (since sql/0027 webhook_inbox holds no payload; since
// 0028 outbox message ids are unique).
import type postgres from "postgres";

/** `create table if not exists naive_inbox (…)` and `naive_outbox`: run by `bun run bench` on its database and by the peer at start. */
export const NAIVE_INBOX_DDL = `
  create table if not exists naive_inbox (
    provider     text        not null,
    endpoint     text        not null,
    event_id     text        not null,
    event_type   text        not null,
    payload      jsonb       not null,
    received_at  timestamptz not null default now(),
    processed_at timestamptz,
    available_at timestamptz not null default now(),
    attempts     integer     not null default 0,
    last_error   text,
    primary key (provider, endpoint, event_id)
  );
  create index if not exists naive_inbox_due on naive_inbox (available_at) where processed_at is null;
  create table if not exists naive_outbox (
    id             bigint      generated always as identity primary key,
    aggregate_type text        not null,
    aggregate_id   text        not null,
    event_type     text        not null,
    payload        jsonb       not null,
    created_at     timestamptz not null default now()
  )`;

/**
 * The seed's `_apply_invoice_paid` (§5.2) for the naive peer and the naive worker: upsert the invoice, read its
 * status, book the payment once (`ledger_entries` unique per invoice and kind), then its outbox row; four
 * statements, each its own round trip. `inv` is a Stripe invoice (amounts in minor units) with the event's id as `event_id`.
 */
export async function applyInvoicePaid(tx: postgres.TransactionSql, inv: Record<string, unknown>): Promise<void> {
  const { id, customer, currency, amount_paid: amount } = inv as { id: string; customer: string; currency: string; amount_paid: number };
  await tx`
    insert into invoices (id, customer_id, status, currency, amount_paid, paid_at)
    values (${id}, ${customer}, 'paid', ${currency}, ${amount}, now())
    on conflict (account, id) do update
       set status = 'paid', amount_paid = excluded.amount_paid, paid_at = coalesce(invoices.paid_at, excluded.paid_at), updated_at = now()
     where invoices.status not in ('paid', 'void')
  `;
  const [row] = await tx`select status from invoices where id = ${id}`;
  if (row?.status !== "paid") return;
  const booked = await tx`
    insert into ledger_entries (invoice_id, kind, amount, currency, event_id)
    values (${id}, 'payment', ${amount}, ${currency}, ${inv.event_id as string})
    on conflict (account, invoice_id, kind) do nothing
    returning id
  `;
  if (booked.length === 0) return;
  await tx`
    insert into naive_outbox (aggregate_type, aggregate_id, event_type, payload)
    values ('Invoice', ${id}, 'InvoicePaymentBooked', ${tx.json({ invoice_id: id, amount } as postgres.JSONValue)})
  `;
}
