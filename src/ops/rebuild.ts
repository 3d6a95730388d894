import { isDatabaseUnavailable, isPermanent, type Db, type Tx } from "../db/db.ts";
import { sleep } from "../db/sleep.ts";
import { describeError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { ReplayRefused } from "../inbox/apply-event.ts";
import { EndpointPaused } from "../inbox/pauses.ts";
import { replayEvent } from "./replay.ts";

/**
 * Which recorded events a rebuild runs: received (the product's own clock, `received_at`) from `since`
 * until `until`, optionally only one endpoint, one event type, one account (`acct_…`, or `""` for the
 * platform's own events).
 */
export interface RebuildWindow {
  since: Date;
  until: Date;
  endpoint?: string;
  eventType?: string;
  account?: string;
}

/** What the window holds, counted before anything runs (`inbox rebuild` prints it first). */
export interface RebuildCounts {
  /** Rows received in the window (with the filters). */
  rows: number;
  /** Settled rows (processed, or ignored) whose type has a handler now: what the run replays. */
  toRun: number;
  /** Settled rows whose type no handler applies now (nothing to run; a thin row's table is the worker's). */
  noHandler: number;
  /** Settled rows whose payload retention dropped (purge): cannot be rebuilt, listed by {@link notRebuildable}. */
  payloadDropped: number;
  /** Rows left alone, by state: unprocessed (the worker's), needs_review (an operator's), resolved, ignored_mode, object_missing. */
  leftAlone: Record<string, number>;
}

/** The handler table of an inbox row's provider (receiver/endpoints.ts `handlersFor`), undefined when none. */
export type TablesOf = (provider: string) => HandlerTable | undefined;

/** The conditions of the window on `webhook_inbox w`, as a fragment. */
function inWindow(db: Db | Tx, w: RebuildWindow) {
  return db`
    w.received_at >= ${w.since} and w.received_at < ${w.until}
    and (${w.endpoint === undefined} or w.endpoint = ${w.endpoint ?? ""})
    and (${w.eventType === undefined} or w.event_type = ${w.eventType ?? ""})
    and (${w.account === undefined} or w.account = ${w.account ?? ""})
  `;
}

/**
 * Counts what the window holds by state, type and whether the payload is still kept, and sorts it into
 * {@link RebuildCounts} with `tables`: a settled row (`processed`, `ignored`) runs when its payload is
 * kept and its type has a handler now. One statement through the `received_at` index.
 */
export async function countRebuild(db: Db, window: RebuildWindow, tables: TablesOf): Promise<RebuildCounts> {
  const groups = await db<{ provider: string; state: string; type: string; kept: boolean; n: number }[]>`
    select w.provider, w.state, w.event_type as type, p.received_at is not null as kept, count(*)::int as n
      from webhook_inbox_state w
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
     where ${inWindow(db, window)}
     group by 1, 2, 3, 4
  `;
  const counts: RebuildCounts = { rows: 0, toRun: 0, noHandler: 0, payloadDropped: 0, leftAlone: {} };
  for (const g of groups) {
    counts.rows += g.n;
    if (g.state !== "processed" && g.state !== "ignored") counts.leftAlone[g.state] = (counts.leftAlone[g.state] ?? 0) + g.n;
    else if (!g.kept) counts.payloadDropped += g.n;
    else if (handles(tables, g.provider, g.type)) counts.toRun += g.n;
    else counts.noHandler += g.n;
  }
  return counts;
}

/** A settled row of the window whose payload retention dropped. */
export interface NotRebuildable {
  provider: string;
  endpoint: string;
  eventId: string;
  eventType: string;
  receivedAt: string;
}

/** The first `limit` settled rows of the window (oldest first) whose payload was dropped by retention: they cannot be rebuilt. */
export async function notRebuildable(db: Db, window: RebuildWindow, limit: number): Promise<NotRebuildable[]> {
  const rows = await db<(Omit<NotRebuildable, "receivedAt"> & { receivedAt: Date })[]>`
    select w.provider, w.endpoint, w.event_id as "eventId", w.event_type as "eventType", w.received_at as "receivedAt"
      from webhook_inbox w
     where ${inWindow(db, window)}
       and w.outcome in ('processed', 'ignored')
       and not exists (select 1 from webhook_inbox_payloads p
                        where (p.provider, p.endpoint, p.event_id, p.received_at) = (w.provider, w.endpoint, w.event_id, w.received_at))
     order by w.received_at, w.provider, w.endpoint, w.event_id
     limit ${limit}
  `;
  return rows.map((r) => ({ ...r, receivedAt: r.receivedAt.toISOString() }));
}

/** A rebuild's checkpoint row (sql/0030 `inbox_rebuilds`). */
export interface Rebuild {
  id: string;
  /** The scope as the command line gave it: what identifies the run to resume. */
  args: Record<string, string | null>;
  since: Date;
  until: Date;
  /** Rows to run, counted at the first start. */
  total: number;
  done: number;
  failed: number;
  /** The run's failed events, the first {@link MAX_FAILURES_KEPT} of them, whichever process ran them. */
  failures: RebuildFailure[];
  inserted: number;
  updated: number;
  deleted: number;
  startedAt: string;
  /** Set once the run reached the end of its window (or `--restart` gave it up). */
  finishedAt: string | null;
}

function rebuildOf(r: Record<string, unknown>): Rebuild {
  const date = (v: unknown) => (v instanceof Date ? v : new Date(String(v)));
  return {
    id: String(r.id),
    args: r.args as Rebuild["args"],
    since: date(r.since_at),
    until: date(r.until_at),
    total: Number(r.total),
    done: Number(r.done),
    failed: Number(r.failed),
    failures: (r.failures ?? []) as RebuildFailure[],
    inserted: Number(r.inserted),
    updated: Number(r.updated),
    deleted: Number(r.deleted),
    startedAt: date(r.started_at).toISOString(),
    finishedAt: r.finished_at ? date(r.finished_at).toISOString() : null,
  };
}

/** The unfinished rebuild of `args` (at most one: a unique index), or undefined. */
export async function findRebuild(db: Db, args: Rebuild["args"]): Promise<Rebuild | undefined> {
  const [row] = await db`select * from inbox_rebuilds where args = ${db.json(args)} and finished_at is null`;
  return row ? rebuildOf(row) : undefined;
}

/**
 * Starts a rebuild of `args` over `window` with `total` rows to run (one statement; the unique index on
 * unfinished `args` makes a concurrent start of the same scope fail instead of running twice).
 */
export async function startRebuild(db: Db, args: Rebuild["args"], window: RebuildWindow, total: number): Promise<Rebuild> {
  const [row] = await db`
    insert into inbox_rebuilds (args, since_at, until_at, total)
    values (${db.json(args)}, ${window.since}, ${window.until}, ${total})
    returning *
  `;
  return rebuildOf(row!);
}

/** Gives up the unfinished rebuild of `args` (`--restart`): marked finished where it stopped. Returns it, if there was one. */
export async function abandonRebuild(db: Db, args: Rebuild["args"]): Promise<Rebuild | undefined> {
  const [row] = await db`
    update inbox_rebuilds
       set finished_at = now(), lease_owner = null, lease_until = null, updated_at = now()
     where args = ${db.json(args)}
       and finished_at is null
    returning *
  `;
  return row ? rebuildOf(row) : undefined;
}

/** Settings of {@link runRebuild}. */
export interface RunRebuildOptions {
  /** Handler tables by provider: today's handlers. */
  tables: TablesOf;
  /** Events replayed per second at most (each in its own transaction). */
  ratePerSec: number;
  /** Lease holder name, unique per process and run. */
  owner: string;
  /** Lease length, ms, renewed by every event's transaction: a run killed holds the next one up this long at most. */
  leaseMs?: number;
  /**
   * Whether the process named by a lease's owner is known to have ended (the entry file: same host, its
   * pid gone): its lease is then taken at once instead of waiting for it to run out. Default: never known.
   */
  ownerGone?: (owner: string) => boolean;
  /** Stops after the current event (Ctrl-C): the checkpoint is then exact. */
  signal?: AbortSignal;
  /** Told after each event (and when the run waits for a lease: `waitingMs`). */
  onProgress?: (progress: RebuildProgress) => void;
  /** Events read per page. Default 500. */
  pageSize?: number;
}

/** Where a run is. */
export interface RebuildProgress {
  done: number;
  total: number;
  failed: number;
  /** Events replayed per second since this process started on the run. */
  perSec: number;
  /** Set while the run waits for the lease of a run that stopped without giving it back, ms left. */
  waitingMs?: number;
}

/** A failed event: its handler refused it (or threw a data error) today; it was rolled back and passed. */
export interface RebuildFailure {
  provider: string;
  endpoint: string;
  eventId: string;
  error: string;
}

/**
 * How a run ended: `done` (the window's end), `interrupted` (Ctrl-C, or a transient failure: run it again
 * to continue), `paused` (an endpoint of the window is paused: resume it, then run again), `busy`
 * (another process holds the run's lease).
 */
export interface RebuildOutcome {
  status: "done" | "interrupted" | "paused" | "busy";
  rebuild: Rebuild;
  /** The run's failed events, the first {@link MAX_FAILURES_KEPT} (kept with the run: a run continued after a crash lists those before it too). */
  failures: RebuildFailure[];
  /** Why the run stopped before the end. */
  reason?: string;
}

/** Default lease of a run, ms. */
export const REBUILD_LEASE_MS = 15_000;
/** Failed events a run keeps by name (its `failed` counts them all). */
export const MAX_FAILURES_KEPT = 1_000;

/**
 * Runs `rebuild` from its checkpoint to the end of its window: every settled row (processed, or
 * ignored) received in it whose payload is kept and whose type has a handler in `tables` now, oldest
 * first (received_at, then key), each through `inbox replay`'s path ({@link replayEvent}: applyEvent's
 * `replay` hold, one transaction, the row locked and re-checked), with the checkpoint moved up to it in
 * that same transaction. So a run stopped at any moment (Ctrl-C, a crash, SIGKILL) continues after the
 * last event it committed, and none is run twice by the run itself; handlers keep money once anyway
 * (their business keys), whatever ran before.
 * - Rate: at most `ratePerSec` events a second, one transaction each, so live deliveries and the
 *   worker wait on at most one rebuild transaction's row locks at a time.
 * - Lease: the run is taken for `owner` (waiting up to `leaseMs` for a run that stopped without giving
 *   it back), renewed and checked in every event's transaction; a run that lost it stops (`busy`).
 * - An event its handler refuses today (a PermanentError, a data error) is rolled back, counted
 *   `failed` and passed; one that changed state since it was listed (requeued, resolved, purged) is
 *   passed; a paused endpoint stops the run (`paused`), as does a transient failure (`interrupted`).
 * @throws what the database threw outside an event (reading a page, taking the lease).
 */
export async function runRebuild(db: Db, rebuild: Rebuild, options: RunRebuildOptions): Promise<RebuildOutcome> {
  const leaseMs = options.leaseMs ?? REBUILD_LEASE_MS;
  let current = rebuild;
  const report = (extra: Partial<RebuildProgress> = {}) =>
    options.onProgress?.({
      done: current.done,
      total: current.total,
      failed: current.failed,
      perSec: ranHere / Math.max(0.001, (Date.now() - startedAt) / 1000),
      ...extra,
    });
  let ranHere = 0;
  let startedAt = Date.now();
  const end = (status: RebuildOutcome["status"], reason?: string): RebuildOutcome => ({
    status,
    rebuild: current,
    failures: current.failures,
    ...(reason ? { reason } : {}),
  });

  const take = { owner: options.owner, leaseMs, signal: options.signal, ownerGone: options.ownerGone ?? (() => false) };
  if (!(await takeRun(db, rebuild.id, take, (waitingMs) => report({ waitingMs }))))
    return end("busy", `Another process is running rebuild ${rebuild.id} (its lease is renewed with every event)`);
  startedAt = Date.now();
  const window = windowOf(rebuild);
  const interval = 1000 / options.ratePerSec;
  let next = Date.now();
  let after: PageCursor | undefined; // the last row read (the checkpoint row's cursor before the first page)
  for (;;) {
    const page = await readPage(db, rebuild.id, window, options.pageSize ?? 500, after);
    if (page.length === 0) break;
    after = page[page.length - 1]!;
    for (const row of page) {
      // A row no handler applies now is passed without a transaction; the next event's move passes it for good.
      if (!handles(options.tables, row.provider, row.eventType)) continue;
      if (next > Date.now()) await sleep(next - Date.now(), options.signal);
      next = Math.max(next, Date.now()) + interval;
      if (options.signal?.aborted) {
        await releaseRun(db, rebuild.id, options.owner);
        return end("interrupted", "Stopped: run the same command again to continue");
      }
      const key = { provider: row.provider, endpoint: row.endpoint, eventId: row.eventId };
      try {
        await replayEvent(db, key, options.tables(row.provider), undefined, async (tx, wrote) => {
          current = await moveRun(tx, rebuild.id, options.owner, leaseMs, key, { done: 1, failed: 0, ...wrote });
        });
        ranHere++;
      } catch (err) {
        if (err instanceof LeaseLost) return end("busy", err.message);
        if (err instanceof EndpointPaused) {
          await releaseRun(db, rebuild.id, options.owner).catch(() => {});
          return end("paused", `${err.message}; then run the same command again to continue`);
        }
        // Changed since it was listed (requeued, resolved by an operator, purged): passed, not run.
        const passed = err instanceof ReplayRefused;
        if (!passed && (!isPermanent(err) || isDatabaseUnavailable(err))) {
          await releaseRun(db, rebuild.id, options.owner).catch(() => {});
          return end("interrupted", `${describeError(err)}: run the same command again to continue`);
        }
        const counts = { done: 1, failed: passed ? 0 : 1, inserted: 0, updated: 0, deleted: 0 };
        const failure = passed ? undefined : { ...key, error: describeError(err) };
        const moved = await db
          .begin((tx) => moveRun(tx, rebuild.id, options.owner, leaseMs, key, counts, failure))
          .catch((e: unknown) => (e instanceof LeaseLost ? e : Promise.reject(e)));
        if (moved instanceof LeaseLost) return end("busy", moved.message);
        current = moved;
      }
      report();
    }
  }
  current = await finishRun(db, rebuild.id, options.owner);
  report();
  return end("done");
}

function handles(tables: TablesOf, provider: string, type: string): boolean {
  const table = tables(provider);
  return table !== undefined && Object.hasOwn(table, type);
}

function windowOf(rebuild: Rebuild): RebuildWindow {
  const arg = (name: string) => rebuild.args[name] ?? undefined;
  return { since: rebuild.since, until: rebuild.until, endpoint: arg("endpoint"), eventType: arg("type"), account: arg("account") };
}

/** Where the run's reading is: a row's key and its received_at as PostgreSQL's text (microseconds kept). */
interface PageCursor {
  receivedAt: string;
  provider: string;
  endpoint: string;
  eventId: string;
}

/**
 * The next rows of the window after `after` (default: the checkpoint's cursor, read in the same
 * statement), oldest first (received_at, then key): settled, payload kept. received_at travels as text,
 * so no cursor loses PostgreSQL's microseconds to a JavaScript Date.
 */
async function readPage(db: Db, id: string, window: RebuildWindow, limit: number, after?: PageCursor) {
  const from = after
    ? db`select ${after.receivedAt}::text::timestamptz as received_at, ${after.provider}::text as provider, ${after.endpoint}::text as endpoint, ${after.eventId}::text as event_id`
    : db`select cursor_received_at as received_at, cursor_provider as provider, cursor_endpoint as endpoint, cursor_event_id as event_id
           from inbox_rebuilds where id = ${id}`;
  return db<(PageCursor & { eventType: string })[]>`
    with c as (${from})
    select w.provider, w.endpoint, w.event_id as "eventId", w.event_type as "eventType", w.received_at::text as "receivedAt"
      from webhook_inbox w, c
     where ${inWindow(db, window)}
       and (c.received_at is null
            or w.received_at >= c.received_at
               and (w.received_at, w.provider, w.endpoint, w.event_id) > (c.received_at, c.provider, c.endpoint, c.event_id))
       and w.outcome in ('processed', 'ignored')
       and exists (select 1 from webhook_inbox_payloads p
                    where (p.provider, p.endpoint, p.event_id, p.received_at) = (w.provider, w.endpoint, w.event_id, w.received_at))
     order by w.received_at, w.provider, w.endpoint, w.event_id
     limit ${limit}
  `;
}

class LeaseLost extends Error {
  override name = "LeaseLost";
}

/**
 * Takes the run's lease for `owner`: at once when nobody holds it, its holder's lease ran out, or its
 * holder is known to have ended (`ownerGone`), else after waiting (polling every 500 ms) up to `leaseMs`
 * + 1 s for it to run out. False when it was renewed all along (another process is running it) or
 * `signal` aborted.
 */
async function takeRun(
  db: Db,
  id: string,
  take: { owner: string; leaseMs: number; signal?: AbortSignal; ownerGone: (owner: string) => boolean },
  waiting: (ms: number) => void,
) {
  const until = Date.now() + take.leaseMs + 1_000;
  for (;;) {
    const [held] = await db<{ owner: string | null }[]>`select lease_owner as owner from inbox_rebuilds where id = ${id}`;
    if (!held) return false;
    const gone = held.owner !== null && held.owner !== take.owner && take.ownerGone(held.owner) ? held.owner : null;
    const [row] = await db<{ left: number }[]>`
      with taken as (
        update inbox_rebuilds
           set lease_owner = ${take.owner}, lease_until = now() + ${take.leaseMs} * interval '1 millisecond', updated_at = now()
         where id = ${id}
           and (lease_owner is null or lease_until < now() or lease_owner = ${take.owner} or lease_owner = ${gone})
        returning 1
      )
      select case when exists (select 1 from taken) then -1
                  else greatest(0, extract(epoch from lease_until - now()) * 1000)::int end as left
        from inbox_rebuilds
       where id = ${id}
    `;
    if (!row || row.left < 0) return row !== undefined;
    if (Date.now() > until || take.signal?.aborted) return false;
    waiting(row.left);
    await sleep(Math.min(500, row.left + 50), take.signal);
  }
}

/**
 * Moves the run's checkpoint to `key`'s row (its received_at read here, in full precision) with the
 * counts, renewing the lease; throws LeaseLost (rolling the event's transaction back) when `owner` no
 * longer holds it. Must run in the event's transaction `tx`.
 */
async function moveRun(
  tx: Tx,
  id: string,
  owner: string,
  leaseMs: number,
  key: { provider: string; endpoint: string; eventId: string },
  add: { done: number; failed: number; inserted: number; updated: number; deleted: number },
  failure?: RebuildFailure,
): Promise<Rebuild> {
  // A row gone meanwhile (purged) leaves the cursor where it was: no later page can list it again.
  const [row] = await tx`
    with w as (
      select received_at, provider, endpoint, event_id
        from webhook_inbox
       where (provider, endpoint, event_id) = (${key.provider}, ${key.endpoint}, ${key.eventId})
    )
    update inbox_rebuilds r
       set cursor_received_at = coalesce((select received_at from w), r.cursor_received_at),
           cursor_provider = coalesce((select provider from w), r.cursor_provider),
           cursor_endpoint = coalesce((select endpoint from w), r.cursor_endpoint),
           cursor_event_id = coalesce((select event_id from w), r.cursor_event_id),
           done = r.done + ${add.done}, failed = r.failed + ${add.failed},
           failures = case when ${failure === undefined} or jsonb_array_length(r.failures) >= ${MAX_FAILURES_KEPT} then r.failures
                           else r.failures || jsonb_build_array(${tx.json({ ...(failure ?? {}) })}::jsonb) end,
           inserted = r.inserted + ${add.inserted}, updated = r.updated + ${add.updated}, deleted = r.deleted + ${add.deleted},
           lease_until = now() + ${leaseMs} * interval '1 millisecond', updated_at = now()
     where r.id = ${id}
       and r.lease_owner = ${owner}
    returning r.*
  `;
  if (!row) throw new LeaseLost(`Rebuild ${id}: this process no longer holds its lease (another process took the run over)`);
  return rebuildOf(row);
}

async function releaseRun(db: Db, id: string, owner: string): Promise<void> {
  await db`update inbox_rebuilds set lease_owner = null, lease_until = null, updated_at = now() where id = ${id} and lease_owner = ${owner}`;
}

async function finishRun(db: Db, id: string, owner: string): Promise<Rebuild> {
  const [row] = await db`
    update inbox_rebuilds
       set finished_at = now(), lease_owner = null, lease_until = null, updated_at = now()
     where id = ${id}
       and lease_owner = ${owner}
    returning *
  `;
  if (!row) throw new LeaseLost(`Rebuild ${id}: this process no longer holds its lease (another process took the run over)`);
  return rebuildOf(row);
}
