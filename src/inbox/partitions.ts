import type { Db } from "../db/db.ts";

/** How far ahead processes and `inbox purge` create the weekly payload partitions, ms: 4 weeks. */
export const PARTITIONS_AHEAD_MS = 28 * 86_400_000;

/**
 * Creates the weekly partitions of `webhook_inbox_payloads` from the current week (Monday, UTC) until
 * `aheadMs` from now, with the SQL function `webhook_inbox_payloads_ensure_partitions` (sql/0027):
 * idempotent, and safe from many processes at once (they queue on a transaction-level advisory lock, so
 * it works behind a transaction pooler). Payloads of a new week waiting in the default partition move
 * into it. Needs no extension. Returns how many partitions it created. Called by every process at start,
 * by {@link keepPartitionsAfterSpill}, and by purge. Partitions only decide how payloads are dropped;
 * whether an event is a duplicate never depends on them.
 * @throws the database error (e.g. lock_timeout) when a partition cannot be created; nothing is half made.
 */
export async function ensurePartitions(db: Db, aheadMs: number = PARTITIONS_AHEAD_MS): Promise<number> {
  const [row] = await db<{ created: number }[]>`
    select webhook_inbox_payloads_ensure_partitions(${aheadMs} * interval '1 millisecond') as created
  `;
  return row?.created ?? 0;
}

/** Shortest time between two {@link keepPartitionsAfterSpill} runs for one pool, ms. */
const SPILL_UPKEEP_EVERY_MS = 60_000;
const lastSpillUpkeep = new WeakMap<Db, number>();

/**
 * Once `inserted` (a committed insertInbox result) says a payload went to the default partition
 * (`spilled`: a process ran past the weeks created for it, on any runtime), starts
 * {@link ensurePartitions} on `db` in the background, at most once a minute per pool, so the next
 * weeks get partitions and the spilled payloads move into theirs. Never throws and never delays the
 * caller: a failure (the database role may not create tables) leaves the payloads in the default
 * partition, where purge deletes them in batches, and the next spill tries again.
 */
export function keepPartitionsAfterSpill(db: Db, inserted: { spilled: boolean }): void {
  if (!inserted.spilled || Date.now() - (lastSpillUpkeep.get(db) ?? 0) < SPILL_UPKEEP_EVERY_MS) return;
  lastSpillUpkeep.set(db, Date.now());
  ensurePartitions(db).catch(() => {});
}

/**
 * One partition of `webhook_inbox_payloads`: a week (`from` ≤ received_at < `to`), the migration's older
 * payloads (`webhook_inbox_payloads_before_…`, `from` null) or `default` (weeks with no partition, and the
 * payloads of rows still unsettled when purge dropped their week). Bounds are null where there is none.
 */
export interface PayloadPartition {
  name: string;
  kind: "range" | "default";
  from: Date | null;
  to: Date | null;
}

/**
 * The partitions of `webhook_inbox_payloads`, oldest first, read from the catalog (`pg_inherits`, the
 * bound of each from `pg_get_expr(relpartbound)`; PostgreSQL manual, "pg_class").
 */
export async function listPartitions(db: Db): Promise<PayloadPartition[]> {
  const rows = await db<{ name: string; bound: string; from: Date | null; to: Date | null }[]>`
    select c.relname as name,
           pg_get_expr(c.relpartbound, c.oid) as bound,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']*)''\\)'))[1]::timestamptz as from,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']*)''\\)'))[1]::timestamptz as to
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'webhook_inbox_payloads'::regclass
     order by 4 nulls last, 1
  `;
  return rows.map((r) => ({ name: r.name, kind: r.bound === "DEFAULT" ? "default" : "range", from: r.from, to: r.to }));
}
