import { isPermanent, type Db, type Tx } from "../db/db.ts";
import { inSpan, type Telemetry } from "../telemetry.ts";
import { describeError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { applyEvent } from "../inbox/apply-event.ts";
import { recordUnapplied } from "../inbox/inbox.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import { recordIgnoredMode, refusalOf } from "../receiver/receive.ts";
import type { ObjectDrift, ObjectKind, StripeObject } from "./object-kind.ts";

/**
 * Where repairs are recorded in the inbox: the key's provider and endpoint, the handler table that
 * applies them, and the endpoint's Stripe mode (`livemode`, config.ts; undefined accepts both).
 */
export interface RepairTarget {
  provider: string;
  endpoint: string;
  handlers: HandlerTable;
  livemode?: boolean;
}

/**
 * What a repair did: `repaired` (handler applied, inbox row processed), `duplicate` (this key was
 * already recorded: an earlier run did it), `needs_review` (recorded parked: the handler refused
 * Stripe's object, or the drift is not repairable by handlers), `ignored_mode` (the object is of the
 * other mode than the endpoint's: recorded, never applied), `held` (the endpoint or account is paused:
 * recorded for the worker, which applies it after `inbox resume`; no needs-review row is resolved), with
 * how many needs-review rows about the object it resolved and, when parked, why.
 */
export interface RepairResult {
  key: string;
  eventType: string;
  outcome: "repaired" | "duplicate" | "needs_review" | "ignored_mode" | "held";
  resolved: number;
  error?: string;
}

/** Bound of a repair's statements, ms. */
const REPAIR_TIMEOUT_MS = 30_000;

/**
 * Applies Stripe's current `object` for one drifted object through the SAME handler a webhook of
 * `kind.repairEvent(object).type` runs, with {@link applyEvent}: recorded in the inbox under the
 * repair's key with `source = 'reconcile'` (a recorded key is a duplicate and nothing runs), the
 * handler, then in the same transaction a re-check of the object ({@link ObjectKind.findDrift}) and,
 * when nothing drifts any more, the resolution of the needs-review rows about the object
 * (`kind.reviewTypes`, `data.object.id`) with a note naming the key. The handlers' forward-only moves
 * and the ledger's business keys keep a repair racing a webhook (or another run) to one booking.
 * Drift the handlers cannot repair, and objects they refuse (PermanentError, SQLSTATE class 22), are
 * recorded parked as needs-review under the same key with `last_error` saying why. A paused endpoint
 * (`inbox pause`) gets the repair recorded for the worker, like a webhook (`held`). First of all, the
 * endpoint's mode rule (receive.ts `refusalOf`, as for a webhook): an object whose mode is not
 * `target.livemode` is recorded `ignored_mode` and nothing is applied or parked.
 * `account` is the account `object` was read for (`""`: the platform): the repair is recorded under it
 * (inbox `account`, {@link repairKeyOf}), its handler applies it under it (`HandlerContext.account`),
 * and the re-check and the resolution of needs-review rows stay inside it. With `telemetry`, the repair
 * is one `repair <kind>` span with its outcome.
 * @throws the database error of a failure that is not permanent (nothing of the attempt remains).
 */
export function repairObject(
  db: Db,
  target: RepairTarget,
  kind: ObjectKind,
  drift: ObjectDrift,
  object: StripeObject,
  account = "",
  telemetry?: Telemetry,
): Promise<RepairResult> {
  const spec = {
    name: `repair ${kind.name}`,
    attributes: {
      "messaging.destination.name": target.endpoint,
      "webhook_inbox.object.id": object.id,
      "webhook_inbox.account": account,
      "webhook_inbox.drift": drift.drift,
    },
  };
  return inSpan(telemetry, spec, async (span) => {
    const result = await repairUntraced(db, target, kind, drift, object, account);
    span?.setAttribute("webhook_inbox.outcome", result.outcome);
    return result;
  });
}

async function repairUntraced(
  db: Db,
  target: RepairTarget,
  kind: ObjectKind,
  drift: ObjectDrift,
  object: StripeObject,
  account: string,
): Promise<RepairResult> {
  const { type } = kind.repairEvent(object);
  const key = repairKeyOf(kind, drift, object, account);
  const event = repairEvent(key, type, object, account, target);
  if (refusesMode(target, event)) {
    const recorded = await recordIgnoredMode(db, target, event);
    return { key, eventType: type, outcome: recorded === "ignored_mode" ? "ignored_mode" : "duplicate", resolved: 0 };
  }
  const inboxKey = { provider: target.provider, endpoint: target.endpoint, eventId: key };
  const park = async (error: string): Promise<RepairResult> => {
    const recorded = await recordUnapplied(db, inboxKey, event, {
      error: error.slice(0, 300),
      parked: true,
      backoff: { baseMs: 1_000, capMs: 1_000 },
    });
    return { key, eventType: type, outcome: recorded ? "needs_review" : "duplicate", resolved: 0, error };
  };
  if (!drift.repairable || !Object.hasOwn(target.handlers, type)) {
    return park(`Reconcile found ${drift.drift} for ${object.id}: not repaired by handlers (check in Stripe, fix by hand, then resolve)`);
  }
  let resolved = 0;
  try {
    const applied = await applyEvent(db, {
      key: inboxKey,
      handlers: target.handlers,
      type,
      object,
      hold: { insert: event },
      timeoutMs: REPAIR_TIMEOUT_MS,
      after: async (tx, outcome) => {
        if (outcome !== "processed") return;
        if ((await kind.findDrift(tx, [object], account)).length > 0) return;
        const note = `Settled by reconcile (${key}): the local state now matches Stripe's current ${kind.name.replace(/s$/, "")}`;
        resolved = (await resolveAbout(tx, target.provider, account, [object.id], note, kind.reviewTypes)).length;
      },
    });
    return { key, eventType: type, outcome: applied === "duplicate" ? "duplicate" : applied === "queued" ? "held" : "repaired", resolved };
  } catch (err) {
    if (!isPermanent(err)) throw err;
    return park(describeError(err));
  }
}

/**
 * The inbox key of a repair: `kind.repairEvent(object).key` when the handlers can repair the drift
 * (also when they then refuse the object, parked under it), that key with `:<drift class>` when they
 * cannot: a drift left after a repair (a refund whose status was repaired but whose charge is unknown)
 * is then recorded for an operator once, instead of being a duplicate of the repair.
 * A connected account's repair is `reconcile:<acct_…>:<id>:…`: the inbox key has no account column, and
 * the same object id under two accounts (Stripe ids are unique per account only) must be two repairs.
 */
export function repairKeyOf(kind: ObjectKind, drift: ObjectDrift, object: StripeObject, account = ""): string {
  const { key } = kind.repairEvent(object);
  const own = account === "" ? key : key.replace(/^reconcile:/, `reconcile:${account}:`);
  return drift.repairable ? own : `${own}:${drift.drift}`;
}

/** `--dry-run`'s answer: the repair's key and what {@link repairObject} would record under it. */
export function plannedRepair(target: RepairTarget, kind: ObjectKind, drift: ObjectDrift, object: StripeObject, account = "") {
  const key = repairKeyOf(kind, drift, object, account);
  const otherMode = refusesMode(target, repairEvent(key, "", object, account, target));
  return { key, outcome: otherMode ? "would_ignore_mode" : drift.repairable ? "would_repair" : "would_park" } as const;
}

/** Whether the endpoint's mode rule (receive.ts `refusalOf`) refuses `event`; not its account rule: a repair is applied under the account it was read for. */
function refusesMode(target: RepairTarget, event: VerifiedEvent): boolean {
  return refusalOf({ name: target.endpoint, ...target }, { ...event, account: "" })?.kind === "mode";
}

/**
 * A repair as the inbox records it: a Stripe event envelope around Stripe's current object under the
 * repair's key, so replay and the worker read it like any event, with `source: "reconcile"` and the
 * object's `livemode` (an object without one, a refund, is of the key's mode: the endpoint's).
 */
function repairEvent(key: string, type: string, object: StripeObject, account: string, target: RepairTarget): VerifiedEvent {
  const livemode = typeof object.livemode === "boolean" ? object.livemode : target.livemode === true;
  const payload = {
    id: key,
    object: "event",
    type,
    created: Math.floor(Date.now() / 1000),
    livemode,
    ...(account === "" ? {} : { account }),
    data: { object },
  };
  return {
    id: key,
    type,
    payload,
    subject: { object, key: object.id },
    body: JSON.stringify(payload),
    source: "reconcile",
    account,
    livemode,
  };
}

/**
 * Resolves with `note` the needs-review rows of `provider` and `account` whose event is about one of
 * `ids` (`data.object.id`, any endpoint): those whose type matches one of `types` (`like` patterns),
 * or, without `types`, those reconciliation itself parked (`source = 'reconcile'`). Returns their event ids.
 */
async function resolveAbout(
  db: Db | Tx,
  provider: string,
  account: string,
  ids: readonly string[],
  note: string,
  types?: readonly string[],
) {
  const rows = await db<{ event_id: string }[]>`
    update webhook_inbox w
       set processed_at = now(),
           outcome = 'resolved',
           resolution_note = ${note},
           needs_review_at = null
      from webhook_inbox_payloads p
     where (p.provider, p.endpoint, p.event_id, p.received_at) = (w.provider, w.endpoint, w.event_id, w.received_at)
       and w.provider = ${provider}
       and w.account = ${account}
       and ${types ? db`w.event_type like any(${types as string[]}::text[])` : db`w.source = 'reconcile'`}
       and w.needs_review_at is not null
       and w.processed_at is null
       and p.payload -> 'data' -> 'object' ->> 'id' = any(${ids as string[]}::text[])
    returning w.event_id
  `;
  return rows.map((r) => r.event_id);
}

/**
 * Resolves the needs-review rows reconciliation itself parked (`source = 'reconcile'`) about objects
 * that now match Stripe (`ids`, found without drift by this run): what they reported is gone (say the
 * missing charge event arrived and booked the refund), so they leave the operators' backlog with a
 * note. Rows parked by webhooks are left for the operator. Only rows of `account` (`""`: the platform),
 * the account whose objects `ids` are. Returns the event ids resolved.
 */
export async function resolveCleared(db: Db, provider: string, kind: ObjectKind, ids: readonly string[], account = ""): Promise<string[]> {
  if (ids.length === 0) return [];
  return resolveAbout(db, provider, account, ids, `Cleared by reconcile ${kind.name}: the local state now matches Stripe's current object`);
}
