// Edge file: WAL volume of a measured operation for `bun run bench` and `bun run bench:retention`.
import type { Db } from "../../db/db.ts";

/**
 * The server's current WAL insert position, as text for {@link walBytesSince}: `pg_current_wal_insert_lsn()`,
 * not `pg_current_wal_lsn()` (the write position), which stays behind records not yet written out: those
 * of a rolled-back transaction or a VACUUM, which no commit flushes, would not be counted.
 */
export async function walPosition(db: Db): Promise<string> {
  const [row] = await db<{ lsn: string }[]>`select pg_current_wal_insert_lsn()::text as lsn`;
  return row?.lsn ?? "0/0";
}

/**
 * WAL bytes written since `lsn` ({@link walPosition}): `pg_wal_lsn_diff(pg_current_wal_insert_lsn(), lsn)`.
 * The whole server's WAL: whatever else runs on it meanwhile (autovacuum, another database) is counted.
 */
export async function walBytesSince(db: Db, lsn: string): Promise<number> {
  const [row] = await db<{ wal: string }[]>`select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), ${lsn}::pg_lsn)::text as wal`;
  return Number(row?.wal ?? 0);
}

/**
 * A `checkpoint` (needs superuser or pg_checkpoint), so a measured operation starts with no page
 * logged since the last one: its first change to each page writes the full page, as in production
 * after every checkpoint, and no checkpoint falls inside a short run by chance. False when the role
 * may not (a managed server): the figures then depend on when the server last checkpointed.
 */
export async function checkpoint(db: Db): Promise<boolean> {
  return db`checkpoint`.then(
    () => true,
    () => false,
  );
}
