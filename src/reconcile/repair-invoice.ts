import { isPermanent, type Db, type Tx } from "../db/db.ts";
import { describeError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { findInvoiceDrift, isRepairable, type InvoiceDrift, type StripeInvoiceRow } from "./invoice-drift.ts";

/** Where repairs are recorded in the inbox: the key's provider and endpoint, and the handler table that applies them. */
export interface RepairTarget {
  provider: string;
  endpoint: string;
  handlers: HandlerTable;
}

/**
 * What a repair did: `repaired` (handler applied, inbox row processed), `duplicate` (this key was
 * already recorded: an earlier run did it), `needs_review` (recorded parked: the handler refused
 * Stripe's object, or the drift is not repairable by handlers), each with how many needs-review rows
 * of the invoice it resolved.
 */
export interface RepairResult {
  key: string;
  eventType: string;
  outcome: "repaired" | "duplicate" | "needs_review";
  resolved: number;
  error?: string;
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
 * The inbox key of a repair: `reconcile:<invoice id>:<status>:<amount_paid>`. Deterministic in
 * Stripe's state, so a second run against the same state finds the key recorded and writes nothing,
 * and a later state (the invoice moved on in Stripe) is a repair of its own.
 */
export function repairKey(invoice: StripeInvoiceRow): string {
  return `reconcile:${invoice.id}:${invoice.status}:${invoice.amount_paid}`;
}

/**
 * Applies Stripe's current invoice `object` for one drifted invoice through the SAME handler a webhook
 * would run (the one for its status, {@link EVENT_FOR_STATUS}), recorded in the inbox under
 * {@link repairKey} with `source = 'reconcile'`, in one transaction: inbox row (`on conflict do nothing`:
 * a recorded key is a duplicate and nothing runs), handler, a re-check of the invoice, and, when the
 * invoice now matches Stripe, the resolution of the invoice's needs-review rows (`invoice.*` events
 * about it) with a note naming the key. The handlers' forward-only moves and the ledger's
 * `unique (invoice_id, kind)` keep a repair racing a webhook (or another run) to one booking.
 * Drift the handlers cannot repair, and objects they refuse (PermanentError, SQLSTATE class 22), are
 * recorded parked as needs-review under the same key with `last_error` saying why, for an operator.
 * @throws the database error of a failure that is not permanent (nothing of the attempt remains).
 */
export async function repairInvoice(
  db: Db,
  target: RepairTarget,
  drift: InvoiceDrift,
  object: Record<string, unknown>,
): Promise<RepairResult> {
  const row: StripeInvoiceRow = { id: drift.invoiceId, ...snake(drift.stripe) };
  const key = repairKey(row);
  const eventType = EVENT_FOR_STATUS[row.status] ?? `invoice.${row.status}`;
  const payload = envelope(key, eventType, object);
  const handler = target.handlers[eventType];
  if (!isRepairable(drift) || !handler) {
    const why = `Reconcile found ${drift.drift} for ${row.id}: not repaired by handlers (check in Stripe, fix by hand, then resolve)`;
    return park(db, target, key, eventType, payload, why);
  }
  try {
    return await db.begin(async (tx) => {
      if (!(await recordRepair(tx, target, key, eventType, payload))) return { key, eventType, outcome: "duplicate", resolved: 0 };
      await handler(tx, object, { provider: target.provider, endpoint: target.endpoint, eventId: key, eventType });
      const left = await findInvoiceDrift(tx, [row]);
      const resolved = left.length === 0 ? await resolveSettled(tx, target, row, key) : 0;
      return { key, eventType, outcome: "repaired", resolved };
    });
  } catch (err) {
    if (!isPermanent(err)) throw err;
    return park(db, target, key, eventType, payload, describeError(err));
  }
}

function snake(s: InvoiceDrift["stripe"]): Omit<StripeInvoiceRow, "id"> {
  return { status: s.status, currency: s.currency, amount_due: s.amountDue, amount_paid: s.amountPaid };
}

/** The payload of a repair's inbox row: a Stripe event envelope around Stripe's current object, so replay and the worker read it like any event. */
function envelope(key: string, type: string, object: Record<string, unknown>): Record<string, unknown> {
  return {
    id: key,
    object: "event",
    type,
    created: Math.floor(Date.now() / 1000),
    livemode: object.livemode === true,
    data: { object },
  };
}

/** Inserts the repair's inbox row settled as processed, source `reconcile`; false when the key is already recorded. */
async function recordRepair(tx: Tx, t: RepairTarget, key: string, type: string, payload: Record<string, unknown>): Promise<boolean> {
  const rows = await tx`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, processed_at, outcome, source)
    values (${t.provider}, ${t.endpoint}, ${key}, ${type}, ${JSON.stringify(payload)}::text::jsonb, now(), 'processed', 'reconcile')
    on conflict (provider, endpoint, event_id) do nothing
    returning 1
  `;
  return rows.length === 1;
}

/** Records the repair parked as needs-review (one statement); `duplicate` when the key is already recorded. */
async function park(
  db: Db,
  t: RepairTarget,
  key: string,
  type: string,
  payload: Record<string, unknown>,
  error: string,
): Promise<RepairResult> {
  const rows = await db`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, attempts, last_error, needs_review_at, source)
    values (${t.provider}, ${t.endpoint}, ${key}, ${type}, ${JSON.stringify(payload)}::text::jsonb, 1, ${error.slice(0, 300)}, now(), 'reconcile')
    on conflict (provider, endpoint, event_id) do nothing
    returning 1
  `;
  return { key, eventType: type, outcome: rows.length === 1 ? "needs_review" : "duplicate", resolved: 0, error };
}

/**
 * Resolves the invoice's needs-review `invoice.*` rows (of any endpoint of the provider) once the
 * repair made the local invoice match Stripe: the note names the repair key and Stripe's state.
 */
async function resolveSettled(tx: Tx, t: RepairTarget, row: StripeInvoiceRow, key: string): Promise<number> {
  const note = `Settled by reconcile (${key}): Stripe's invoice is ${row.status}, ${row.amount_paid} ${row.currency} paid; the local invoice now matches`;
  const rows = await tx`
    update webhook_inbox
       set processed_at = now(),
           outcome = 'resolved',
           resolution_note = ${note},
           needs_review_at = null
     where provider = ${t.provider}
       and needs_review_at is not null
       and processed_at is null
       and event_type like 'invoice.%'
       and payload -> 'data' -> 'object' ->> 'id' = ${row.id}
    returning 1
  `;
  return rows.length;
}
