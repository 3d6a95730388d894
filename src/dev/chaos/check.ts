import type { Db } from "../../db/db.ts";
import type { Storm } from "./model.ts";

/** Invariant violations found after a storm; every list empty means the run passed. */
export interface Verdict {
  /** Acknowledged (2xx) events with no inbox row: lost after acknowledgement. */
  lost: string[];
  /** Events never acknowledged before the deadline. */
  unacknowledged: string[];
  /**
   * Invoices with more than one payment, a payment of the wrong amount, a payment that must not exist,
   * or outbox rows ≠ ledger rows; balance transactions booked more than once per kind, or without exactly
   * one outbox message.
   */
  doubleBooked: string[];
  /** Invoices whose final status or net money differs from the model (or that exist when they must not); money out linked to no invoice. */
  wrongState: string[];
  /** Rows still waiting for a worker after the drain. */
  unprocessed: number;
  /** Needs-review rows that the run did not inject on purpose. */
  unexpectedNeedsReview: string[];
  /** Injected poison events, and whether each ended needs-review. */
  poison: { eventId: string; parked: boolean }[];
}

/**
 * Checks the database against the storm's model (the inbox's invariants): every acknowledged event is
 * in the inbox; each invoice's status equals the model's; exactly one `payment` ledger entry of the
 * right amount for each invoice that ends paid and none otherwise; exactly one outbox row per ledger
 * entry; no unprocessed rows; needs-review rows only for injected poison events. Money out: exactly one
 * ledger row and one outbox message per (balance transaction, kind), every row linked to an invoice, and
 * each invoice's refunded, dispute amounts and net (view invoice_net) equal to the model's.
 * `provider` and `endpoint` name the inbox rows of the storm (`stripe-thin` for a thin storm).
 */
export async function checkStorm(
  db: Db,
  storm: Storm,
  endpoint: string,
  acknowledged: ReadonlySet<string>,
  unacknowledged: readonly string[],
  provider = "stripe",
): Promise<Verdict> {
  const inbox = await db<{ event_id: string; processed: boolean; parked: boolean }[]>`
    select event_id, processed_at is not null as processed, needs_review_at is not null as parked
      from webhook_inbox
     where provider = ${provider}
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
  const money = await db<
    { invoice_id: string; refunded: string; dispute_withdrawn: string; dispute_fees: string; dispute_reinstated: string; net: string }[]
  >`
    select invoice_id, refunded::text, dispute_withdrawn::text, dispute_fees::text, dispute_reinstated::text, net::text
      from invoice_net
     where invoice_id is not null
  `;
  const moneyById = new Map(money.map((r) => [r.invoice_id, r]));
  const movements = await db<{ balance_transaction: string; kind: string; entries: number; outbox: number; linked: boolean }[]>`
    select balance_transaction, kind, entries, outbox, linked
      from (select l.balance_transaction, l.kind, count(*)::int as entries, bool_and(l.invoice_id is not null) as linked,
                   (select count(*)::int
                      from outbox o
                     where o.payload ->> 'balance_transaction' = l.balance_transaction
                       and o.payload ->> 'kind' = l.kind) as outbox
              from ledger_entries_linked l
             where l.kind <> 'payment'
             group by l.balance_transaction, l.kind) m
     where entries <> 1 or outbox <> 1 or not linked
  `;
  // An announcement of money that was never booked is as wrong as a booking without one.
  const unbooked = await db<{ balance_transaction: string; kind: string }[]>`
    select o.payload ->> 'balance_transaction' as balance_transaction, o.payload ->> 'kind' as kind
      from outbox o
     where o.event_type in ('RefundBooked', 'RefundReversed', 'DisputeFundsWithdrawn', 'DisputeFeeBooked', 'DisputeFeeReturned',
                            'DisputeFundsReinstated')
       and not exists (select 1
                         from ledger_entries l
                        where l.balance_transaction = o.payload ->> 'balance_transaction'
                          and l.kind = o.payload ->> 'kind')
  `;
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
  for (const u of unbooked) verdict.doubleBooked.push(`${u.balance_transaction} ${u.kind}: an outbox message but no ledger entry`);
  for (const m of movements) {
    if (m.entries !== 1 || m.outbox !== 1)
      verdict.doubleBooked.push(`${m.balance_transaction} ${m.kind}: ${m.entries} ledger entries, ${m.outbox} outbox rows`);
    if (!m.linked) verdict.wrongState.push(`${m.balance_transaction} ${m.kind}: linked to no invoice`);
  }
  for (const e of storm.expected) {
    const got = moneyById.get(e.invoiceId);
    const want = e.money;
    const shown = (r: { refunded: unknown; disputeWithdrawn: unknown; disputeFees: unknown; disputeReinstated: unknown; net: unknown }) =>
      `refunded ${r.refunded}, dispute withdrawn ${r.disputeWithdrawn}, fees ${r.disputeFees}, reinstated ${r.disputeReinstated}, net ${r.net}`;
    const actual = got
      ? {
          refunded: got.refunded,
          disputeWithdrawn: got.dispute_withdrawn,
          disputeFees: got.dispute_fees,
          disputeReinstated: got.dispute_reinstated,
          net: got.net,
        }
      : { refunded: "0", disputeWithdrawn: "0", disputeFees: "0", disputeReinstated: "0", net: "0" };
    const expectedMoney = {
      refunded: String(want.refunded),
      disputeWithdrawn: String(want.disputeWithdrawn),
      disputeFees: String(want.disputeFees),
      disputeReinstated: String(want.disputeReinstated),
      net: String(want.net),
    };
    if (shown(actual) !== shown(expectedMoney))
      verdict.wrongState.push(`${e.invoiceId}: ${shown(actual)}; expected ${shown(expectedMoney)}`);
    const status = invoices.get(e.invoiceId) ?? null;
    if (status !== e.status) verdict.wrongState.push(`${e.invoiceId}: ${status ?? "absent"}, expected ${e.status ?? "absent"}`);
    const booked = ledgerById.get(e.invoiceId);
    if (e.payment === null && booked) verdict.doubleBooked.push(`${e.invoiceId}: booked ${booked.amount} but must not be booked`);
    if (e.payment !== null && !booked) verdict.wrongState.push(`${e.invoiceId}: no payment booked, expected ${e.payment}`);
    if (booked && (booked.entries !== 1 || booked.outbox !== 1 || (e.payment !== null && booked.amount !== String(e.payment)))) {
      verdict.doubleBooked.push(
        `${e.invoiceId}: ${booked.entries} ledger entries totalling ${booked.amount} (expected ${e.payment}), ${booked.outbox} outbox rows`,
      );
    }
  }
  return verdict;
}

/** True when the verdict has no violation. */
export function passed(v: Verdict): boolean {
  return (
    v.lost.length === 0 &&
    v.unacknowledged.length === 0 &&
    v.doubleBooked.length === 0 &&
    v.wrongState.length === 0 &&
    v.unprocessed === 0 &&
    v.unexpectedNeedsReview.length === 0 &&
    v.poison.every((p) => p.parked)
  );
}
