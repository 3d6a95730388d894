// The backfill checkpoint of one endpoint and account, and its lease (sql/0017_event_backfill.sql,
// sql/0021_connect_accounts.sql).
import type { Db, Tx } from "../db/db.ts";

/** One endpoint's checkpoint as backfill reads it. Times are Dates; null before the first page. */
export interface Checkpoint {
  /** Newest event backfill recorded: the `ending_before` cursor of the next page. */
  cursorEventId: string | null;
  cursorCreated: Date | null;
  /** Every event Stripe listed as created before this moment is recorded. */
  coveredUntil: Date | null;
}

/** A checkpoint row's key: the endpoint, and the Stripe account whose events it covers. */
export interface CheckpointKey {
  provider: string;
  endpoint: string;
  /** A connected account's id (`acct_…`), or `""`/undefined for the platform's own events. */
  account?: string;
}

/** The checkpoint of `key`, or one with every field null when backfill never ran for it. */
export async function readCheckpoint(db: Db | Tx, key: CheckpointKey): Promise<Checkpoint> {
  const [row] = await db<{ cursor_event_id: string | null; cursor_created: Date | null; covered_until: Date | null }[]>`
    select cursor_event_id, cursor_created, covered_until
      from event_backfill_checkpoints
     where (provider, endpoint, account) = (${key.provider}, ${key.endpoint}, ${key.account ?? ""})
  `;
  return {
    cursorEventId: row?.cursor_event_id ?? null,
    cursorCreated: row?.cursor_created ?? null,
    coveredUntil: row?.covered_until ?? null,
  };
}

/**
 * Takes (or renews) the backfill lease of `key` for `owner` for `leaseMs`: granted when nobody holds
 * it, its holder's lease ran out (a killed process), or `owner` already holds it. One statement
 * (the row is created on first use), so two processes racing for it cannot both win: the loser waits
 * on the row lock, then sees the winner's lease. Returns whether `owner` holds it now.
 */
export async function takeLease(db: Db, key: CheckpointKey, owner: string, leaseMs: number): Promise<boolean> {
  const rows = await db`
    insert into event_backfill_checkpoints as c (provider, endpoint, account, lease_owner, lease_until)
    values (${key.provider}, ${key.endpoint}, ${key.account ?? ""}, ${owner}, now() + ${leaseMs} * interval '1 millisecond')
    on conflict (provider, endpoint, account) do update
       set lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, updated_at = now()
     where c.lease_owner is null or c.lease_until < now() or c.lease_owner = excluded.lease_owner
    returning 1
  `;
  return rows.length === 1;
}

/** Gives the lease back (only when `owner` still holds it), so the next run need not wait for it to expire. */
export async function releaseLease(db: Db, key: CheckpointKey, owner: string): Promise<void> {
  await db`
    update event_backfill_checkpoints
       set lease_owner = null, lease_until = null, updated_at = now()
     where (provider, endpoint, account) = (${key.provider}, ${key.endpoint}, ${key.account ?? ""})
       and lease_owner = ${owner}
  `;
}

/** How an event's transaction moves the checkpoint (see {@link advanceCheckpoint}). */
export interface Advance {
  /** The event recorded last (the next cursor; a page's newest event for its last one) and its `created`, Unix seconds. */
  cursorEventId: string;
  cursorCreatedSec: number;
  /** The new `covered_until`, Unix seconds (ms precision allowed). */
  coveredUntilSec: number;
  /** The run's window start, Unix seconds: the checkpoint moves only when the run started at or before what it covered (no gap). */
  startSec: number;
}

/**
 * Moves `key`'s checkpoint to `advance`, renewing `owner`'s lease for `leaseMs`. Never moves it
 * backwards, and never over a gap: a run whose window started after `covered_until` leaves it alone
 * (its events are recorded, but what lies between is not covered).
 * Returns false when `owner` no longer holds the lease (another process took it after it expired):
 * the caller must roll that event's transaction back and stop.
 * Must be called inside the transaction `tx` that records the event it moves to (record-page.ts).
 */
export async function advanceCheckpoint(tx: Tx, key: CheckpointKey, owner: string, leaseMs: number, advance: Advance): Promise<boolean> {
  const rows = await tx`
    update event_backfill_checkpoints
       set cursor_event_id = case when moves then ${advance.cursorEventId} else cursor_event_id end,
           cursor_created  = case when moves then to_timestamp(${advance.cursorCreatedSec}) else cursor_created end,
           covered_until   = case when moves then to_timestamp(${advance.coveredUntilSec}) else covered_until end,
           lease_until = now() + ${leaseMs} * interval '1 millisecond',
           updated_at = now()
      from (select covered_until is null or (covered_until >= to_timestamp(${advance.startSec})
                   and covered_until <= to_timestamp(${advance.coveredUntilSec})) as moves
              from event_backfill_checkpoints
             where (provider, endpoint, account) = (${key.provider}, ${key.endpoint}, ${key.account ?? ""})) as m
     where (provider, endpoint, account) = (${key.provider}, ${key.endpoint}, ${key.account ?? ""})
       and lease_owner = ${owner}
    returning 1
  `;
  return rows.length === 1;
}
