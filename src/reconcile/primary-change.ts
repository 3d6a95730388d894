// Noticing a database failover: the primary the process writes to is not the one it (or any other
// process) wrote to last, so commits acknowledged just before the switch may be gone (asynchronous
// replication). A change records event backfill requests per Stripe endpoint and account (handlers/backfill-requests.ts)
// for a window starting well before the old primary was last seen; docs/failover.md.
import type { Db } from "../db/db.ts";
import { recordBackfillRequest } from "../handlers/backfill-requests.ts";
import { knownAccounts } from "./catch-up.ts";

/** Which PostgreSQL primary a connection reached: `pg_control_system()` and the current WAL timeline. */
export interface PrimaryIdentity {
  /** The cluster's system identifier (a 64-bit number, as decimal text): kept by a promoted standby, new for a rebuilt cluster. */
  systemIdentifier: string;
  /** The timeline the primary writes WAL on now: a promotion starts a new one (PostgreSQL manual, "Timelines"). */
  timelineId: number;
}

/** What {@link notePrimary} found. */
export interface PrimaryCheck {
  current: PrimaryIdentity;
  /** The primary seen last before this one (any process), when it is another one; undefined: no change. */
  previous?: PrimaryIdentity & { lastSeenAt: Date };
  /** Start of the backfill window recorded for the change (previous `lastSeenAt` − margin). */
  since?: Date;
  /** Backfill requests this call recorded (0 when another process recorded them first). */
  requests: number;
}

/**
 * The primary `db` is connected to: the system identifier from `pg_control_system()` and the timeline
 * from the name of the WAL file being written (`pg_walfile_name(pg_current_wal_lsn())`, first 8 hex
 * digits): unlike `pg_control_checkpoint().timeline_id` it moves at promotion, not at the next checkpoint
 * (PostgreSQL manual, "System Administration Functions", "Control Data Functions").
 * @throws postgres.js errors; `pg_current_wal_lsn()` fails on a standby (read-only: not a primary).
 */
export async function readPrimaryIdentity(db: Db): Promise<PrimaryIdentity> {
  const [row] = await db<{ system_identifier: string; timeline_id: number }[]>`
    select s.system_identifier::text as system_identifier,
           ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int as timeline_id
      from pg_control_system() s
  `;
  return { systemIdentifier: row!.system_identifier, timelineId: row!.timeline_id };
}

/**
 * Records that the primary `db` reaches now was seen (`database_primaries`, sql/0024_failover.sql), in
 * one transaction that serialises the processes checking at once (the table is locked). When the newest
 * row before it is another primary (a promoted standby: same system identifier, a higher timeline; or
 * another cluster), it records for each of `endpoints` (classic Stripe endpoints) a backfill request for
 * the platform's events created from `marginMs` ms before that primary was last seen until now, and at
 * a Connect endpoint one more per connected account it knows ({@link knownAccounts}, as the new primary
 * holds them), once per change (`requested_by` = `failover <system identifier>/<timeline> <endpoint>`).
 * Recorded in this transaction rather than expanded by the runner: each (endpoint, account) is then
 * served, retried and shown unfinished on its own, and the account column never holds a wildcard.
 * A first check ever records the primary only. The window starts at the old primary's `last_seen_at`
 * as the new one holds it (replicated, so never later than what it really saw).
 * @throws postgres.js errors (the caller logs and checks again later).
 */
export async function notePrimary(
  db: Db,
  endpoints: readonly { name: string; connect?: boolean }[],
  marginMs: number,
): Promise<PrimaryCheck> {
  const current = await readPrimaryIdentity(db);
  return db.begin(async (tx) => {
    await tx`lock table database_primaries in share row exclusive mode`;
    const [last] = await tx<{ system_identifier: string; timeline_id: number; last_seen_at: Date }[]>`
      select system_identifier, timeline_id, last_seen_at
        from database_primaries
       order by last_seen_at desc
       limit 1
    `;
    await tx`
      insert into database_primaries (system_identifier, timeline_id)
      values (${current.systemIdentifier}, ${current.timelineId})
      on conflict (system_identifier, timeline_id) do update
         set last_seen_at = greatest(database_primaries.last_seen_at, excluded.last_seen_at)
    `;
    const same = last && last.system_identifier === current.systemIdentifier && last.timeline_id === current.timelineId;
    if (!last || same) return { current, requests: 0 };
    const previous = { systemIdentifier: last.system_identifier, timelineId: last.timeline_id, lastSeenAt: last.last_seen_at };
    const since = new Date(last.last_seen_at.getTime() - marginMs);
    const [clock] = await tx<{ now: Date }[]>`select now()`;
    const now = clock!.now;
    let requests = 0;
    for (const { name: endpoint, connect } of endpoints) {
      const requestedBy = `failover ${current.systemIdentifier}/${current.timelineId} ${endpoint}`;
      const accounts = connect ? ["", ...(await knownAccounts(tx, { provider: "stripe", endpoint }))] : [""];
      for (const account of accounts)
        if ((await recordBackfillRequest(tx, { endpoint, account, requestedBy, start: since, end: now })) !== undefined) requests++;
    }
    return { current, previous, since, requests };
  });
}
