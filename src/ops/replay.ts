import type { Db, Tx } from "../db/db.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { applyEvent, ReplayRefused } from "../inbox/apply-event.ts";
import { subjectOf } from "../providers/registry.ts";
import { keyIs, type InboxKey } from "../inbox/inbox.ts";
import { storedEvent } from "../inbox/stored-event.ts";

/** What a replay did: the handler's effect, counted by PostgreSQL for its transaction. */
export interface ReplayResult {
  eventType: string;
  /** False when the type has no handler (an ignored event): nothing ran. */
  handled: boolean;
  /** Rows the replay's transaction inserted, updated and deleted, over all user tables. */
  inserted: number;
  updated: number;
  deleted: number;
}

/** Bound of a replay's statements, ms: an operator's command, not a delivery. */
const REPLAY_TIMEOUT_MS = 30_000;

/**
 * Runs an already settled event through its handler again with {@link applyEvent} (`replay`: one
 * transaction that holds the inbox row `FOR UPDATE` and re-checks it is settled and not resolved by an
 * operator). Safe because handlers are idempotent: a replay of a booked payment books nothing (0
 * inserted). A `processed` row replays through its handler; an `ignored` one through a handler added
 * since it arrived (if any). A `resolved` row is refused: an operator settled it by hand (`inbox
 * resolve`), and running the handler would override that decision. The effect is read from
 * `pg_stat_xact_user_tables` (PostgreSQL manual, "The Cumulative Statistics System") before and after
 * the handler, inside the transaction, and reported as the difference. An `ignored_mode` row (a Stripe
 * event of the other mode) is applied only when `endpointLivemode`, the endpoint's mode as configured
 * now (`STRIPE_MODE[_<NAME>]`), is the event's `livemode`: the recovery after a wrong mode setting.
 * `inTransaction`, when given, runs last in the replay's transaction with what the handler wrote, so
 * whatever it records commits with the replay or not at all (inbox rebuild moves its checkpoint there).
 * @throws ReplayRefused when the row does not exist, is not settled yet (the worker owns it), was resolved by
 *   an operator, is `ignored_mode` and its mode still differs, or its payload was dropped by retention;
 *   EndpointPaused when its endpoint or account is paused (inbox pause); the handler's own error after
 *   rolling back; what `inTransaction` threw.
 */
export async function replayEvent(
  db: Db,
  key: InboxKey,
  handlers: HandlerTable | undefined,
  endpointLivemode?: boolean,
  inTransaction?: (tx: Tx, wrote: Omit<ReplayResult, "eventType" | "handled">) => Promise<void>,
): Promise<ReplayResult> {
  const name = `${key.eventId} at ${key.provider}/${key.endpoint}`;
  const [row] = await db<
    {
      event_type: string;
      payload: Record<string, unknown> | null;
      raw_body: string | null;
      kept: boolean;
      processed: boolean;
      account: string;
    }[]
  >`
    select w.event_type, p.payload, p.raw_body, p.received_at is not null as kept, w.processed_at is not null as processed, w.account
      from webhook_inbox w
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
     where ${keyIs(db, key, "w")}
  `;
  if (!row) throw new ReplayRefused(`Cannot replay ${name}: no such inbox row`);
  if (row.processed && !row.kept) throw new ReplayRefused(`Cannot replay ${name}: its payload was dropped by retention`);
  // A row kept only as its raw body (jsonb refused it before 0010) is replayed from its storable copy.
  // Only a settled row's payload is read: applyEvent refuses any other before the object is used.
  const payload = row.processed && row.kept ? storedEvent(row.payload, row.raw_body).payload : undefined;
  const table = handlers ?? {};
  let before = { inserted: 0, updated: 0, deleted: 0 };
  let after = before;
  await applyEvent(db, {
    key,
    handlers: table,
    type: row.event_type,
    // A row that is not settled has no payload to trust yet: applyEvent refuses it before this is read.
    object: payload ? subjectOf(key.provider, payload).object : {},
    account: row.account,
    hold: { replay: true, modeFixed: endpointLivemode !== undefined && payload?.livemode === endpointLivemode },
    timeoutMs: REPLAY_TIMEOUT_MS,
    // Pending statistics of earlier transactions on this connection may not be flushed yet
    // (PostgreSQL ≥ 15 flushes them at most once a second), so count the difference.
    before: async (tx) => void (before = await writesSoFar(tx)),
    after: async (tx) => {
      after = await writesSoFar(tx);
      await inTransaction?.(tx, {
        inserted: after.inserted - before.inserted,
        updated: after.updated - before.updated,
        deleted: after.deleted - before.deleted,
      });
    },
  });
  return {
    eventType: row.event_type,
    handled: Object.hasOwn(table, row.event_type),
    inserted: after.inserted - before.inserted,
    updated: after.updated - before.updated,
    deleted: after.deleted - before.deleted,
  };
}
async function writesSoFar(tx: Tx): Promise<{ inserted: number; updated: number; deleted: number }> {
  const [stats] = await tx<{ inserted: number; updated: number; deleted: number }[]>`
    select coalesce(sum(n_tup_ins), 0)::int as inserted,
           coalesce(sum(n_tup_upd), 0)::int as updated,
           coalesce(sum(n_tup_del), 0)::int as deleted
      from pg_stat_xact_user_tables
  `;
  return stats ?? { inserted: 0, updated: 0, deleted: 0 };
}
