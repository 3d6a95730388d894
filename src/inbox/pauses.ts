// Paused endpoints (sql/0030 `endpoint_pauses`) as the paths that apply events see them: the lock that
// keeps a pause from committing while an event of its endpoint is being applied, the condition each
// path checks after taking it, and what the backlog readers report.
import type postgres from "postgres";
import type { Db, Tx } from "../db/db.ts";

/**
 * The first key of the pause locks (`pg_advisory_xact_lock[_shared](PAUSE_LOCK, hashtext(endpoint))`),
 * an int4 pair apart from the product's single-bigint advisory locks (migrate, partitions, money-out).
 * Every transaction that may apply an event of an endpoint takes it SHARED in its first statement
 * (db.ts `boundTransaction`), so a pause (ops/pause.ts, EXCLUSIVE) waits until the applications in flight
 * end, and an application waits for a pause being committed; the statement that checks
 * `endpoint_pauses` (the hold) comes after, so in READ COMMITTED it sees a pause that committed while the
 * lock waited (PostgreSQL manual, 13.2.1).
 */
export const PAUSE_LOCK = 0x70617573; // "paus"

/**
 * Thrown by applyEvent when a row it was to apply under a `claimed` or `replay` hold belongs to a paused
 * endpoint (or account): nothing was applied and the transaction (or the row's savepoint) rolled back.
 * Not permanent: the worker gives the claim's attempt back and leaves the row for after `resume`;
 * replay and rebuild report it.
 */
export class EndpointPaused extends Error {
  override name = "EndpointPaused";
  constructor(
    readonly endpoint: string,
    readonly account: string,
  ) {
    super(
      `Endpoint ${endpoint}${account === "" ? "" : ` (account ${account})`} is paused: nothing of it is applied until ` +
        `\`bun run inbox resume --endpoint ${endpoint}${account === "" ? "" : ` --account ${account}`}\``,
    );
  }
}

/**
 * The condition "events of `endpoint` and `account` are paused" as a postgres.js fragment: a pause of
 * the whole endpoint (`account` '') or of that account. `endpoint` and `account` are values or fragments
 * naming a column (qualified: `endpoint_pauses` has columns of the same names).
 */
export function pausedWhere(sql: Db | Tx, endpoint: string | postgres.Fragment, account: string | postgres.Fragment) {
  return sql`exists (select 1 from endpoint_pauses p where p.endpoint = ${endpoint} and p.account in ('', ${account}))`;
}

/**
 * The pause that holds events of `endpoint` and `account`, as a postgres.js fragment whose value is that
 * pause's account: `''` when the whole endpoint is paused (it wins over an account's own pause), the
 * account when only it is, null when neither. Arguments as {@link pausedWhere}'s.
 */
export function pausedBy(sql: Db | Tx, endpoint: string | postgres.Fragment, account: string | postgres.Fragment) {
  return sql`(select min(p.account) from endpoint_pauses p where p.endpoint = ${endpoint} and p.account in ('', ${account}))`;
}

/** One pause as `inbox status`, /metrics and the operator's page show it. */
export interface Pause {
  endpoint: string;
  /** `""`: every event of the endpoint; else one connected account (`acct_…`). */
  account: string;
  /** ISO time the pause committed. */
  pausedAt: string;
  /** Seconds since then. */
  ageSec: number;
  note: string | null;
  /** Unprocessed rows it holds back now (queued or recorded while paused, not needs-review). */
  held: number;
}

/**
 * Every pause, oldest first, with the unprocessed rows each holds back (a count over the open-rows
 * index, `webhook_inbox_open`, per pause: pauses are few, and an empty table costs one index probe).
 */
export async function readPauses(db: Db | Tx): Promise<Pause[]> {
  const rows = await db<{ endpoint: string; account: string; pausedAt: Date; ageSec: number; note: string | null; held: number }[]>`
    select p.endpoint, p.account, p.paused_at as "pausedAt", extract(epoch from now() - p.paused_at)::float8 as "ageSec", p.note,
           (select count(*)::int
              from webhook_inbox w
             where w.processed_at is null
               and w.needs_review_at is null
               and w.endpoint = p.endpoint
               and (p.account = '' or w.account = p.account)) as held
      from endpoint_pauses p
     order by p.paused_at, p.endpoint, p.account
  `;
  return rows.map((r) => ({ ...r, pausedAt: r.pausedAt.toISOString() }));
}
