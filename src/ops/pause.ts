import { sqlState, SQLSTATE, type Db } from "../db/db.ts";
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
}

/** How long a pause waits, by default, for the transactions applying its endpoint's events to end, ms. */
export const PAUSE_WAIT_MS = 60_000;

/**
 * Pauses `scope` (sql/0029 `endpoint_pauses`): from its commit on, events of the endpoint (of the one
 * account, when given) are still verified, recorded and answered 2xx, and none is applied: sync and
 * hybrid deliveries, event backfill and reconcile repairs record them for the worker, the worker claims
 * none, and replay and rebuild refuse them (inbox/apply-event.ts, worker/claim.ts). It takes the
 * endpoint's pause lock EXCLUSIVE (inbox/pauses.ts) before it writes, so it commits only once every
 * transaction applying an event of the endpoint has ended, however it started: when this returns,
 * nothing of the scope is being applied and nothing will be until {@link resumeEndpoint}. It waits at
 * most `waitMs` for them (PostgreSQL's `lock_timeout`). Pausing a scope already paused changes nothing
 * (`paused: false`). `note` is kept with the pause (what the maintenance is).
 * @throws Error when the wait ran out (nothing changed), or the database error.
 */
export async function pauseEndpoint(db: Db, scope: PauseScope, note?: string, waitMs = PAUSE_WAIT_MS): Promise<PauseResult> {
  const account = scope.account ?? "";
  try {
    return await db.begin(async (tx) => {
      // A pause stalled while it holds the lock (a stopped terminal) must not hold the deliveries waiting on it: its session ends.
      await tx`select set_config('lock_timeout', ${String(waitMs)}, true), set_config('idle_in_transaction_session_timeout', ${String(Math.max(waitMs, 1_000))}, true)`;
      await tx`select pg_advisory_xact_lock(${PAUSE_LOCK}::int, hashtext(${scope.endpoint}))`;
      const [row] = await tx<{ paused: boolean; pausedAt: Date; note: string | null }[]>`
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
      return { endpoint: scope.endpoint, account, paused: row!.paused, pausedAt: row!.pausedAt.toISOString(), note: row!.note };
    });
  } catch (err) {
    if (sqlState(err) !== SQLSTATE.lockNotAvailable) throw err;
    throw new Error(
      `Cannot pause ${scope.endpoint}: events of it were still being applied after ${Math.round(waitMs / 1000)} s ` +
        "(a long transaction holds its pause lock); nothing changed, run it again",
    );
  }
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
