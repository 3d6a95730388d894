import type { Db } from "../../db/db.ts";
import type { Storm } from "./model.ts";

/** Invariant violations found after a storm; every list empty means the run passed. */
export interface Verdict {
  /** Acknowledged (2xx) events with no inbox row: lost after acknowledgement. */
  lost: string[];
  /** Events never acknowledged before the deadline. */
  unacknowledged: string[];
  /** Invoices with more than one payment, a payment of the wrong amount, a payment that must not exist, or outbox rows ≠ ledger rows. */
  doubleBooked: string[];
  /** Invoices whose final status differs from the model (or that exist when they must not). */
  wrongState: string[];
  /** Rows still waiting for a worker after the drain. */
  unprocessed: number;
  /** Needs-review rows that the run did not inject on purpose. */
  unexpectedNeedsReview: string[];
  /** Injected poison events, and whether each ended needs-review. */
  poison: { eventId: string; parked: boolean }[];
}

/**
 * Checks the database against the storm's model (issue #5's invariants): every acknowledged event is
 * in the inbox; each invoice's status equals the model's; exactly one `payment` ledger entry of the
 * right amount for each invoice that ends paid and none otherwise; exactly one outbox row per ledger
 * entry; no unprocessed rows; needs-review rows only for injected poison events.
 */
export async function checkStorm(db: Db, storm: Storm, endpoint: string, acknowledged: ReadonlySet<string>, unacknowledged: readonly string[]): Promise<Verdict> {
  const inbox = await db<{ event_id: string; processed: boolean; parked: boolean }[]>`
    select event_id, processed_at is not null as processed, needs_review_at is not null as parked
      from webhook_inbox
     where provider = 'stripe'
       and endpoint = ${endpoint}
  `;
  const byId = new Map(inbox.map((r) => [r.event_id, r]));
  const invoices = new Map((await db<{ id: string; status: string }[]>`select id, status from invoices`).map((r) => [r.id, r.status]));
  const ledger = await db<{ invoice_id: string; entries: number; amount: string; outbox: number }[]>`
    select l.invoice_id,
           count(*)::int as entries,
           sum(l.amount)::text as amount,
           (select count(*)::int from outbox o where o.aggregate_id = l.invoice_id and o.event_type = 'InvoicePaymentBooked') as outbox
      from ledger_entries l
     where l.kind = 'payment'
     group by l.invoice_id
  `;
  const ledgerById = new Map(ledger.map((r) => [r.invoice_id, r]));
  const poisonIds = new Set(storm.poisonEventIds);
  const verdict: Verdict = {
    lost: [...acknowledged].filter((id) => !byId.has(id)),
    unacknowledged: [...unacknowledged],
    doubleBooked: [],
    wrongState: [],
    unprocessed: inbox.filter((r) => !r.processed && !r.parked).length,
    unexpectedNeedsReview: inbox.filter((r) => r.parked && !poisonIds.has(r.event_id)).map((r) => r.event_id),
    poison: storm.poisonEventIds.map((id) => ({ eventId: id, parked: byId.get(id)?.parked ?? false })),
  };
  for (const e of storm.expected) {
    const status = invoices.get(e.invoiceId) ?? null;
    if (status !== e.status) verdict.wrongState.push(`${e.invoiceId}: ${status ?? "absent"}, expected ${e.status ?? "absent"}`);
    const booked = ledgerById.get(e.invoiceId);
    if (e.payment === null && booked) verdict.doubleBooked.push(`${e.invoiceId}: booked ${booked.amount} but must not be booked`);
    if (e.payment !== null && !booked) verdict.wrongState.push(`${e.invoiceId}: no payment booked, expected ${e.payment}`);
    if (booked && (booked.entries !== 1 || booked.outbox !== 1 || (e.payment !== null && booked.amount !== String(e.payment)))) {
      verdict.doubleBooked.push(`${e.invoiceId}: ${booked.entries} ledger entries totalling ${booked.amount} (expected ${e.payment}), ${booked.outbox} outbox rows`);
    }
  }
  return verdict;
}

/** True when the verdict has no violation. */
export function passed(v: Verdict): boolean {
  return v.lost.length === 0 && v.unacknowledged.length === 0 && v.doubleBooked.length === 0 && v.wrongState.length === 0 &&
    v.unprocessed === 0 && v.unexpectedNeedsReview.length === 0 && v.poison.every((p) => p.parked);
}
