import type { Db } from "../db/db.ts";
import { sleep } from "../db/sleep.ts";
import { NOTIFY_CHANNEL } from "../inbox/inbox.ts";
import { PAUSE_LOCK, readPauses, type Pause } from "../inbox/pauses.ts";

/** What a pause names: an endpoint (as `--endpoint` gives it) and, optionally, one connected account. */
export interface PauseScope {
  endpoint: string;
  /** A connected account (`acct_…`): only its events are held. `""` or undefined: every event of the endpoint. */
  account?: string;
}

/** What {@link pauseEndpoint} did. */
export interface PauseResult {
  endpoint: string;
  account: string;
  /** False when the scope was paused already (nothing changed; `pausedAt` and `note` are that pause's). */
  paused: boolean;
  pausedAt: string;
  note: string | null;
  /**
   * Transactions that had begun applying events of the endpoint before the pause committed and were still
   * running when `waitMs` ran out (0: none is left, nothing of the scope is being applied). They end on
   * their own bound and may still commit what they apply.
   */
  stillApplying: number;
}

/** How long a pause waits, by default, for the transactions applying its endpoint's events to end, ms. */
export const PAUSE_WAIT_MS = 60_000;

/** How often a pause looks whether those transactions have ended, ms. */
const QUIET_POLL_MS = 50;

/**
 * Pauses `scope` (sql/0030 `endpoint_pauses`): from its commit on, events of the endpoint (of the one
 * account, when given) are still verified, recorded and answered 2xx, and none is applied: sync and
 * hybrid deliveries, event backfill and reconcile repairs record them for the worker, the worker claims
 * none, and replay and rebuild refuse them (inbox/apply-event.ts, worker/claim.ts). The pause row commits
 * at once; then this waits, at most `waitMs`, until every transaction that had begun applying an event of
 * the endpoint before that commit has ended: those holding the endpoint's pause lock then
 * (inbox/pauses.ts, taken SHARED by every applying transaction in its first statement, before its hold
 * check), read from `pg_locks` by virtual transaction id and polled every 50 ms. Any transaction that
 * takes the lock later checks the pause after it (READ COMMITTED: each statement sees what committed
 * before it began) and holds the event. The pause never takes the lock itself, so nothing waits behind
 * it: deliveries go on being answered however long an application in flight runs. When this returns
 * with `stillApplying` 0, nothing of the scope is being applied and nothing will be until
 * {@link resumeEndpoint}. Pausing a scope already paused changes nothing (`paused: false`) but waits the
 * same. `note` is kept with the pause (what the maintenance is). PostgreSQL manual, "Advisory Locks" and
 * "pg_locks".
 * @throws the database error (the pause may have committed: `inbox status` lists it).
 */
export async function pauseEndpoint(db: Db, scope: PauseScope, note?: string, waitMs = PAUSE_WAIT_MS): Promise<PauseResult> {
  const account = scope.account ?? "";
  const [row] = await db<{ paused: boolean; pausedAt: Date; note: string | null }[]>`
    with added as (
      insert into endpoint_pauses (endpoint, account, paused_at, note)
      values (${scope.endpoint}, ${account}, clock_timestamp(), ${note ?? null})
      on conflict (endpoint, account) do nothing
      returning paused_at, note
    )
    select true as paused, paused_at as "pausedAt", note from added
    union all
    select false, paused_at, note from endpoint_pauses
     where (endpoint, account) = (${scope.endpoint}, ${account})
       and not exists (select 1 from added)
  `;
  // The applying transactions that may have checked the scope before the pause committed: those holding its lock now.
  const holders = (vxids: readonly string[] | null) => db<{ vxid: string }[]>`
    select l.virtualtransaction as vxid
      from pg_locks l
     where l.locktype = 'advisory'
       and l.database = (select oid from pg_database where datname = current_database())
       and l.classid = ${PAUSE_LOCK}::int::oid
       and l.objid = hashtext(${scope.endpoint})::oid
       and l.objsubid = 2
       and l.granted
       and (${vxids}::text[] is null or l.virtualtransaction = any(${vxids}::text[]))
  `;
  let left = (await holders(null)).map((h) => h.vxid);
  for (const deadline = Date.now() + waitMs; left.length > 0 && Date.now() < deadline;) {
    await sleep(QUIET_POLL_MS);
    left = (await holders(left)).map((h) => h.vxid);
  }
  return {
    endpoint: scope.endpoint,
    account,
    paused: row!.paused,
    pausedAt: row!.pausedAt.toISOString(),
    note: row!.note,
    stillApplying: left.length,
  };
}

/** What {@link resumeEndpoint} did. */
export interface ResumeResult {
  endpoint: string;
  account: string;
  /** False when the scope was not paused (nothing changed). */
  resumed: boolean;
  /** When the pause lifted now had begun (ISO), when there was one. */
  pausedAt?: string;
  /** Pauses still in force at this endpoint after this one (another account's, or the whole endpoint's). */
  remaining: Pause[];
}

/**
 * Lifts the pause of `scope` and wakes the workers (NOTIFY in the same statement, sent at its commit):
 * they claim the rows it held back, oldest first within each endpoint and account (worker/claim.ts).
 * An endpoint with no worker running (sync mode only) needs one now: `bun run worker`. Only this exact
 * scope is lifted: the endpoint's other pauses stay, and are returned in `remaining`.
 */
export async function resumeEndpoint(db: Db, scope: PauseScope): Promise<ResumeResult> {
  const account = scope.account ?? "";
  const [row] = await db<{ pausedAt: Date; notified: string }[]>`
    with lifted as (
      delete from endpoint_pauses
       where (endpoint, account) = (${scope.endpoint}, ${account})
      returning paused_at
    )
    select paused_at as "pausedAt", pg_notify(${NOTIFY_CHANNEL}, ${scope.endpoint})::text as notified
      from lifted
  `;
  const remaining = (await readPauses(db)).filter((p) => p.endpoint === scope.endpoint);
  return {
    endpoint: scope.endpoint,
    account,
    resumed: row !== undefined,
    ...(row ? { pausedAt: row.pausedAt.toISOString() } : {}),
    remaining,
  };
}
