import type { Db, Tx } from "../db/db.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { subjectOf } from "../providers/registry.ts";
import type { InboxKey } from "../inbox/inbox.ts";

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

/**
 * Runs an already settled event through its handler again, in one transaction that holds the inbox
 * row `FOR UPDATE`. Safe because handlers are idempotent: a replay of a booked payment books nothing
 * (0 inserted). A `processed` row replays through its handler; an `ignored` one through a handler
 * added since it arrived (if any). A `resolved` row is refused: an operator settled it by hand
 * (`inbox resolve`), and running the handler would override that decision. The effect is read from `pg_stat_xact_user_tables` (PostgreSQL manual, "The Cumulative
 * Statistics System") before and after the handler, inside the transaction, and reported as the difference.
 * @throws Error when the row does not exist, is not settled yet (the worker owns it), was resolved by
 *   an operator, or its payload was dropped by retention; the handler's own error after rolling back.
 */
export async function replayEvent(db: Db, key: InboxKey, handlers: HandlerTable | undefined): Promise<ReplayResult> {
  return db.begin(async (tx) => {
    const [row] = await tx<
      {
        event_type: string;
        payload: Record<string, unknown> | null;
        processed_at: Date | null;
        parked: boolean;
        outcome: string | null;
        resolution_note: string | null;
      }[]
    >`
      select event_type, payload, processed_at, needs_review_at is not null as parked, outcome, resolution_note
        from webhook_inbox
       where (provider, endpoint, event_id) = (${key.provider}, ${key.endpoint}, ${key.eventId})
         for update
    `;
    const name = `${key.eventId} at ${key.provider}/${key.endpoint}`;
    if (!row) throw new Error(`Cannot replay ${name}: no such inbox row`);
    if (!row.processed_at && row.parked)
      throw new Error(`Cannot replay ${name}: it is needs-review, not processed (requeue it for the worker, or resolve it)`);
    if (!row.processed_at) throw new Error(`Cannot replay ${name}: it is not processed yet (let the worker finish it)`);
    if (row.outcome === "resolved")
      throw new Error(
        `Cannot replay ${name}: an operator resolved it by hand ("${row.resolution_note}"); running its handler would override that`,
      );
    if (!row.payload) throw new Error(`Cannot replay ${name}: its payload was dropped by retention`);
    // Pending statistics of earlier transactions on this connection may not be flushed yet
    // (PostgreSQL ≥ 15 flushes them at most once a second), so count the difference.
    const before = await writesSoFar(tx);
    const handler = handlers?.[row.event_type];
    if (handler) {
      await handler(tx, subjectOf(key.provider, row.payload).object, {
        provider: key.provider,
        endpoint: key.endpoint,
        eventId: key.eventId,
        eventType: row.event_type,
      });
    }
    const after = await writesSoFar(tx);
    return {
      eventType: row.event_type,
      handled: handler !== undefined,
      inserted: after.inserted - before.inserted,
      updated: after.updated - before.updated,
      deleted: after.deleted - before.deleted,
    };
  });
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
