import { subjectOf } from "../providers/registry.ts";
import type { Db } from "../db/db.ts";

/** What one event changed in the billing tables, as operators see it. Amounts in minor units; times ISO 8601. */
export interface EventEffects {
  invoices: {
    id: string;
    /** The connected account (`acct_…`), `""` for the platform's own. */
    account: string;
    customerId: string;
    status: string;
    currency: string;
    amountDue: string;
    amountPaid: string;
    updatedAt: string;
  }[];
  ledgerEntries: { id: string; invoiceId: string; kind: string; amount: string; currency: string; bookedAt: string; account: string }[];
  outbox: { id: string; aggregateType: string; aggregateId: string; eventType: string; createdAt: string; publishedAt: string | null }[];
}

/**
 * The rows `eventId` changed: the ledger entries it booked (`ledger_entries.event_id`), the outbox
 * messages its transaction wrote (their payload's `event_id`), and the invoices those entries belong
 * to plus, when a row of the event is settled `processed` (its handler ran and committed), the invoice
 * the event itself is about (its subject's key, read by the row's provider: for Stripe the object's
 * `invoice`, else its own id), as it is now: invoices record no event id, so this is as close as the
 * tables tell. An ignored, needs-review (refused or failed: rolled back), unprocessed, resolved or
 * `object_missing` event names no invoice of its own. Invoices are those of the event's own account
 * (an invoice is keyed by account and id, sql/0021). Reads through the indexes of
 * sql/0016_event_effects.sql. Empty lists for an unknown id.
 */
export async function eventEffects(db: Db, eventId: string): Promise<EventEffects> {
  // Columns named as the fields they fill; their times (nullable as the field is) are Dates, made ISO text below.
  type Read<T, Time extends keyof T> = Omit<T, Time> & { [K in Time]: Date | Extract<T[K], null> };
  const ledger = await db<Read<EventEffects["ledgerEntries"][number], "bookedAt">[]>`
    select id::text, invoice_id as "invoiceId", kind, amount::text, currency, booked_at as "bookedAt", account
      from ledger_entries
     where event_id = ${eventId}
     order by id
  `;
  const outbox = await db<Read<EventEffects["outbox"][number], "createdAt" | "publishedAt">[]>`
    select id::text, aggregate_type as "aggregateType", aggregate_id as "aggregateId", event_type as "eventType",
           created_at as "createdAt", published_at as "publishedAt"
      from outbox
     where payload ->> 'event_id' = ${eventId}
     order by id
  `;
  // The invoice the event itself is about (its subject's business key, as its provider reads it), only
  // where its handler ran and committed: an ignored or parked event wrote nothing to it.
  const rows = await db<{ provider: string; account: string; payload: Record<string, unknown> | null }[]>`
    select w.provider, w.account, p.payload
      from webhook_inbox w
      join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
     where w.event_id = ${eventId}
       and w.outcome = 'processed'
  `;
  // Invoices are keyed by (account, id) (sql/0021): the same invoice id under another connected account is another invoice.
  const subjects = rows.flatMap((r) => {
    try {
      const key = r.payload ? subjectOf(r.provider, r.payload).key : undefined;
      return key ? [{ account: r.account, id: key }] : [];
    } catch {
      return []; // an event without a readable subject changed nothing this page can show
    }
  });
  const wanted = [...ledger.map((l) => ({ account: l.account, id: l.invoiceId })), ...subjects].filter((k) => k.id !== null);
  const invoices = await db<Read<EventEffects["invoices"][number], "updatedAt">[]>`
    select id, account, customer_id as "customerId", status, currency, amount_due::text as "amountDue", amount_paid::text as "amountPaid",
           updated_at as "updatedAt"
      from invoices
     where (account, id) in (select * from unnest(${wanted.map((k) => k.account)}::text[], ${wanted.map((k) => k.id)}::text[]))
     order by id, account
  `;
  return {
    invoices: invoices.map((i) => ({ ...i, updatedAt: i.updatedAt.toISOString() })),
    ledgerEntries: ledger.map((l) => ({ ...l, bookedAt: l.bookedAt.toISOString() })),
    outbox: outbox.map((o) => ({ ...o, createdAt: o.createdAt.toISOString(), publishedAt: o.publishedAt?.toISOString() ?? null })),
  };
}
