import { isPermanent, type Db, type Tx } from "../db/db.ts";
import { describeError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import type { ObjectDrift, ObjectKind, StripeObject } from "./object-kind.ts";

/** Where repairs are recorded in the inbox: the key's provider and endpoint, and the handler table that applies them. */
export interface RepairTarget {
  provider: string;
  endpoint: string;
  handlers: HandlerTable;
}

/**
 * What a repair did: `repaired` (handler applied, inbox row processed), `duplicate` (this key was
 * already recorded: an earlier run did it), `needs_review` (recorded parked: the handler refused
 * Stripe's object, or the drift is not repairable by handlers), with how many needs-review rows about
 * the object it resolved and, when parked, why.
 */
export interface RepairResult {
  key: string;
  eventType: string;
  outcome: "repaired" | "duplicate" | "needs_review";
  resolved: number;
  error?: string;
}

/**
 * Applies Stripe's current `object` for one drifted object through the SAME handler a webhook of
 * `kind.repairEvent(object).type` runs, recorded in the inbox under that key with
 * `source = 'reconcile'`, in one transaction: the inbox row (`on conflict do nothing`: a recorded key
 * is a duplicate and nothing runs), the handler, a re-check of the object ({@link ObjectKind.findDrift}
 * inside the transaction) and, when nothing drifts any more, the resolution of the needs-review rows
 * about the object (`kind.reviewTypes`, `data.object.id`) with a note naming the key. The handlers'
 * forward-only moves and the ledger's business keys keep a repair racing a webhook (or another run)
 * to one booking. Drift the handlers cannot repair, and objects they refuse (PermanentError, SQLSTATE
 * class 22), are recorded parked as needs-review under the same key with `last_error` saying why.
 * @throws the database error of a failure that is not permanent (nothing of the attempt remains).
 */
export async function repairObject(
  db: Db,
  target: RepairTarget,
  kind: ObjectKind,
  drift: ObjectDrift,
  object: StripeObject,
): Promise<RepairResult> {
  const { type } = kind.repairEvent(object);
  const key = repairKeyOf(kind, drift, object);
  const payload = envelope(key, type, object);
  const handler = target.handlers[type];
  if (!drift.repairable || !handler) {
    const why = `Reconcile found ${drift.drift} for ${object.id}: not repaired by handlers (check in Stripe, fix by hand, then resolve)`;
    return park(db, target, key, type, payload, why);
  }
  try {
    return await db.begin(async (tx) => {
      if (!(await recordRepair(tx, target, key, type, payload))) return { key, eventType: type, outcome: "duplicate", resolved: 0 };
      await handler(tx, object, { provider: target.provider, endpoint: target.endpoint, eventId: key, eventType: type });
      const left = await kind.findDrift(tx, [object]);
      const resolved = left.length === 0 ? await resolveSettled(tx, target, kind, object.id, key) : 0;
      return { key, eventType: type, outcome: "repaired", resolved };
    });
  } catch (err) {
    if (!isPermanent(err)) throw err;
    return park(db, target, key, type, payload, describeError(err));
  }
}

/**
 * The inbox key of a repair: `kind.repairEvent(object).key` when the handlers can repair the drift
 * (also when they then refuse the object, parked under it), that key with `:<drift class>` when they
 * cannot: a drift left after a repair (a refund whose status was repaired but whose charge is unknown)
 * is then recorded for an operator once, instead of being a duplicate of the repair.
 */
export function repairKeyOf(kind: ObjectKind, drift: ObjectDrift, object: StripeObject): string {
  const { key } = kind.repairEvent(object);
  return drift.repairable ? key : `${key}:${drift.drift}`;
}

/** The payload of a repair's inbox row: a Stripe event envelope around Stripe's current object, so replay and the worker read it like any event. */
function envelope(key: string, type: string, object: StripeObject): Record<string, unknown> {
  return { id: key, object: "event", type, created: Math.floor(Date.now() / 1000), livemode: object.livemode === true, data: { object } };
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
 * Resolves the needs-review rows about object `id` (types matching `kind.reviewTypes`, any endpoint of
 * the provider) once the repair left it matching Stripe: the note names the repair key.
 */
async function resolveSettled(tx: Tx, t: RepairTarget, kind: ObjectKind, id: string, key: string): Promise<number> {
  const note = `Settled by reconcile (${key}): the local state now matches Stripe's current ${kind.name.replace(/s$/, "")}`;
  const rows = await tx`
    update webhook_inbox
       set processed_at = now(),
           outcome = 'resolved',
           resolution_note = ${note},
           needs_review_at = null
     where provider = ${t.provider}
       and needs_review_at is not null
       and processed_at is null
       and event_type like any(${kind.reviewTypes as string[]}::text[])
       and payload -> 'data' -> 'object' ->> 'id' = ${id}
    returning 1
  `;
  return rows.length;
}

/**
 * Resolves the needs-review rows reconciliation itself parked (`source = 'reconcile'`) about objects
 * that now match Stripe (`ids`, found without drift by this run): what they reported is gone (say the
 * missing charge event arrived and booked the refund), so they leave the operators' backlog with a
 * note. Rows parked by webhooks are left for the operator. Returns the event ids resolved.
 */
export async function resolveCleared(db: Db, provider: string, kind: ObjectKind, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const note = `Cleared by reconcile ${kind.name}: the local state now matches Stripe's current object`;
  const rows = await db<{ event_id: string }[]>`
    update webhook_inbox
       set processed_at = now(),
           outcome = 'resolved',
           resolution_note = ${note},
           needs_review_at = null
     where provider = ${provider}
       and source = 'reconcile'
       and needs_review_at is not null
       and processed_at is null
       and payload -> 'data' -> 'object' ->> 'id' = any(${ids as string[]}::text[])
    returning event_id
  `;
  return rows.map((r) => r.event_id);
}
