import type { Db } from "../db/db.ts";

/** How far ahead serve, worker and `inbox purge` create weekly inbox partitions, ms: 4 weeks. */
export const PARTITIONS_AHEAD_MS = 28 * 86_400_000;

/**
 * Creates the weekly partitions of `webhook_inbox` from the current week (Monday, UTC) until `aheadMs`
 * from now, with the SQL function `webhook_inbox_ensure_partitions` (sql/0026): idempotent, and safe from
 * many processes at once (they queue on a transaction-level advisory lock, so it works behind a
 * transaction pooler). Rows of a new week waiting in the default partition move into it. Needs no
 * extension. Returns how many partitions it created. Called at start by serve and worker and by purge.
 * @throws the database error (e.g. lock_timeout) when a partition cannot be created; nothing is half made.
 */
export async function ensurePartitions(db: Db, aheadMs: number = PARTITIONS_AHEAD_MS): Promise<number> {
  const [row] = await db<{ created: number }[]>`
    select webhook_inbox_ensure_partitions(${aheadMs} * interval '1 millisecond') as created
  `;
  return row?.created ?? 0;
}

/**
 * One partition of `webhook_inbox`: a week (`from` ≤ event_created_at < `to`), the migration's older rows
 * (`webhook_inbox_before_…`, from 1970), `undated` (events with no creation time of their own, stored as
 * '-infinity') or `default` (times no partition covers). Bounds are null where the partition has none.
 */
export interface InboxPartition {
  name: string;
  kind: "range" | "undated" | "default";
  from: Date | null;
  to: Date | null;
}

/**
 * The partitions of `webhook_inbox`, oldest first, read from the catalog (`pg_inherits`, the bound of
 * each from `pg_get_expr(relpartbound)`; PostgreSQL manual, "pg_class").
 */
export async function listPartitions(db: Db): Promise<InboxPartition[]> {
  const rows = await db<{ name: string; bound: string; from: Date | null; to: Date | null }[]>`
    select c.relname as name,
           pg_get_expr(c.relpartbound, c.oid) as bound,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']*)''\\)'))[1]::timestamptz as from,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']*)''\\)'))[1]::timestamptz as to
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'webhook_inbox'::regclass
     order by 4 nulls first, 1
  `;
  return rows.map((r) => ({
    name: r.name,
    kind: r.bound === "DEFAULT" ? "default" : r.from === null ? "undated" : "range",
    from: r.from,
    to: r.to,
  }));
}
