// A claim loop's heartbeat row (sql/0029_health.sql, loop_heartbeats): what the operator's page and
// /metrics read to say whether a worker or a dispatcher is alive, and when it last took work.
import { settleWithin, type Db, type Tx } from "../db/db.ts";
import { sleep } from "../db/sleep.ts";
import { describeError } from "../errors.ts";
import type { LogFn } from "../log.ts";

/** Beat interval unless told otherwise, ms. */
export const DEFAULT_BEAT_MS = 10_000;

/** Longest a stop waits for its last beat (the one that marks the row stopped), ms. */
export const STOP_BEAT_MS = 1_000;

/** A row whose last beat is older than this many of its intervals belongs to a process that died. */
export const DEAD_AFTER_BEATS = 3;

/** Who beats: the entry file knows its host and pid (the core has no process API). */
export interface HeartbeatSettings {
  host: string;
  pid: number;
  /** What it serves, for the operator: slots, the sink's origin. Never a secret. */
  detail?: string;
  /** Beat interval, ms; default {@link DEFAULT_BEAT_MS}. */
  everyMs?: number;
}

/** A running heartbeat: counts claims in memory, writes them once per interval. */
export interface Heartbeat {
  /** A claim took `rows` rows (or messages) now; no database write: the next beat carries it. */
  claimed(rows: number): void;
  /**
   * Resolves once the last beat, the one marking the row stopped, is written (sent when the loop's
   * signal aborted), or {@link STOP_BEAT_MS} after that signal, whichever comes first.
   */
  stopped(): Promise<void>;
}

/**
 * Starts the heartbeat of one claim loop (`kind` worker or dispatcher): upserts its row at once, then
 * once every `everyMs` (one statement, never per claim), with the database's `now()` as the beat and the
 * last claim that took work converted to the database's clock (its age on this host subtracted from
 * `now()`), so a host's clock never makes a live process look dead. The same statement deletes rows
 * silent for a day. A failed beat is logged `{ <kind>: "heartbeat_failed" }` at warn and never ends the
 * loop. When `signal` aborts (the loop stops claiming) the beats end and one last beat marks the row
 * stopped at once, while the loop finishes its work in flight: a stop whose database no longer answers
 * is then not held up by it (the row reads dead three intervals later instead). Readers call a row dead
 * after {@link DEAD_AFTER_BEATS} intervals without a beat.
 */
export function startHeartbeat(
  db: Db,
  kind: "worker" | "dispatcher",
  settings: HeartbeatSettings,
  log: LogFn,
  signal: AbortSignal,
): Heartbeat {
  const id = crypto.randomUUID();
  const everyMs = settings.everyMs ?? DEFAULT_BEAT_MS;
  let claimed = 0;
  let lastClaimMs: number | undefined;
  let failing = false;

  const beat = async (stopped: boolean) => {
    const claimAgeMs = lastClaimMs === undefined ? null : Math.max(0, Date.now() - lastClaimMs);
    try {
      await settleWithin(
        db`
          with cleaned as (
            delete from loop_heartbeats
             where beat_at < now() - interval '1 day'
          )
          insert into loop_heartbeats (id, kind, host, pid, detail, beat_every_ms, last_claim_at, claimed, stopped_at)
          values (${id}, ${kind}, ${settings.host}, ${settings.pid}, ${settings.detail ?? ""}, ${everyMs},
                  now() - ${claimAgeMs}::float8 * interval '1 millisecond', ${claimed}, case when ${stopped} then now() end)
          on conflict (id) do update
             set beat_at = now(),
                 last_claim_at = excluded.last_claim_at,
                 claimed = excluded.claimed,
                 stopped_at = excluded.stopped_at
        `,
        everyMs,
        "The heartbeat",
      );
      failing = false;
    } catch (err) {
      // One line per outage, not one per beat.
      if (!failing) log({ [kind]: "heartbeat_failed", error: describeError(err), level: "warn" });
      failing = true;
    }
  };

  const running = (async () => {
    while (!signal.aborted) {
      await beat(false);
      await sleep(everyMs, signal);
    }
  })();
  // The last beat, bounded from the moment of the stop (not from when the loop's work in flight ends).
  const last = new Promise<void>((resolve) => {
    const finish = () => void Promise.race([running.then(() => beat(true)), sleep(STOP_BEAT_MS)]).then(resolve);
    if (signal.aborted) finish();
    else signal.addEventListener("abort", finish, { once: true });
  });

  return {
    claimed(rows) {
      if (rows <= 0) return;
      claimed += rows;
      lastClaimMs = Date.now();
    },
    stopped: () => last,
  };
}

/** One worker or dispatcher as its heartbeat row tells it. Times ISO 8601, ages in seconds. */
export interface LoopProcess {
  kind: "worker" | "dispatcher";
  host: string;
  pid: number;
  detail: string;
  /** `alive`: beat within {@link DEAD_AFTER_BEATS} intervals; `dead`: no beat since (killed, host lost); `stopped`: stopped cleanly. */
  state: "alive" | "dead" | "stopped";
  startedAt: string;
  /** Seconds since its last beat. */
  beatAgeSec: number;
  beatEveryMs: number;
  /** Seconds since the last claim that took work; null: none since it started. */
  lastClaimAgeSec: number | null;
  /** Rows (worker) or messages (dispatcher) claimed since it started. */
  claimed: number;
}

/**
 * The heartbeat rows (at most a day's: older ones are deleted by the beats), each with its state by the
 * database's clock: live processes first, then by kind and newest start. A handful of rows, for the
 * operator's page, `inbox status` and `/metrics`.
 */
export async function readHeartbeats(db: Db | Tx): Promise<LoopProcess[]> {
  type Row = Omit<LoopProcess, "startedAt" | "claimed"> & { startedAt: Date; claimed: string };
  const rows = await db<Row[]>`
    select *
      from (select kind, host, pid, detail, started_at as "startedAt", beat_every_ms as "beatEveryMs", claimed::text as claimed,
                   extract(epoch from now() - beat_at)::float8 as "beatAgeSec",
                   extract(epoch from now() - last_claim_at)::float8 as "lastClaimAgeSec",
                   case when stopped_at is not null then 'stopped'
                        when beat_at < now() - ${DEAD_AFTER_BEATS} * beat_every_ms * interval '1 millisecond' then 'dead'
                        else 'alive' end as state
              from loop_heartbeats) p
     order by state = 'alive' desc, kind desc, "startedAt" desc
  `;
  return rows.map((r) => ({ ...r, startedAt: r.startedAt.toISOString(), claimed: Number(r.claimed) }));
}
