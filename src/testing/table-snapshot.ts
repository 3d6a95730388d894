// Every row of the business tables of a database, whole and in a stable order: what a replay of a
// settled event must leave unchanged (handlers are idempotent: seed §5.2). Used by the package's
// contract suite (contract-suite.ts) and the repository's handler-table suite.
import type { Db } from "../db/db.ts";

/** Tables a snapshot leaves out: the inbox's own state row (a replay may touch it) and the migration logs. */
const NOT_BUSINESS = new Set(["webhook_inbox", "schema_migrations", "app_schema_migrations"]);

/**
 * The base tables of the current schema but the migration logs, by name (PostgreSQL manual,
 * "information_schema.tables"); includes `webhook_inbox`.
 */
export async function userTables(db: Db): Promise<string[]> {
  const rows = await db<{ name: string }[]>`
    select table_name as name
      from information_schema.tables
     where table_schema = current_schema()
       and table_type = 'BASE TABLE'
       and table_name not in ('schema_migrations', 'app_schema_migrations')
     order by 1
  `;
  return rows.map((r) => r.name);
}

/**
 * Every row of every business table (every table of {@link userTables} but `webhook_inbox`) as its
 * `to_jsonb` text, sorted, by table name: equal before and after an operation that must change no row.
 * Reads whole tables: for test databases, not production ones.
 */
export async function snapshotTables(db: Db): Promise<Record<string, string[]>> {
  const tables = (await userTables(db)).filter((t) => !NOT_BUSINESS.has(t));
  const result: Record<string, string[]> = {};
  for (const table of tables) {
    const rows = await db.unsafe<{ row: string }[]>(`select to_jsonb(t)::text as row from "${table}" t order by 1`);
    result[table] = rows.map((r) => r.row);
  }
  return result;
}
