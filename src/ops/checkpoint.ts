import type { Db } from "../db/db.ts";

/**
 * Table the reconciliation with Stripe records its progress in, once that migration exists; until
 * then the operator's page leaves its tile out.
 */
export const RECONCILIATION_CHECKPOINT_TABLE = "reconciliation_checkpoints";

/**
 * Seconds since the newest reconciliation checkpoint was written, or null when there is no such
 * table yet or it holds no row. Reads `max(updated_at)` of {@link RECONCILIATION_CHECKPOINT_TABLE}
 * when the table has that column, else null.
 */
export async function reconciliationCheckpointAge(db: Db): Promise<number | null> {
  const [column] = await db<{ ok: boolean }[]>`
    select true as ok
      from information_schema.columns
     where table_schema = current_schema()
       and table_name = ${RECONCILIATION_CHECKPOINT_TABLE}
       and column_name = 'updated_at'
  `;
  if (!column) return null;
  const [row] = await db<{ age: number | null }[]>`
    select extract(epoch from now() - max(updated_at))::float8 as age
      from ${db(RECONCILIATION_CHECKPOINT_TABLE)}
  `;
  return row?.age ?? null;
}
