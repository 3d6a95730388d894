import type { Db } from "../db/db.ts";

/**
 * Table in which event backfill (reconciliation with Stripe's event list) records how far it got per
 * endpoint, once that migration exists; until then the operator's page leaves its tile out.
 */
export const RECONCILIATION_CHECKPOINT_TABLE = "event_backfill_checkpoints";

/** How old one endpoint's reconciliation checkpoint is. */
export interface CheckpointAge {
  provider: string;
  endpoint: string;
  /** Seconds since `covered_until`: every event created before it is recorded. */
  ageSec: number;
}

/**
 * The age of each endpoint's reconciliation checkpoint (`now() - covered_until` of
 * {@link RECONCILIATION_CHECKPOINT_TABLE}, rows with a `covered_until` only), or null when the table
 * or that column does not exist (yet). Asks `information_schema` first, so a database without the
 * table is no error.
 */
export async function reconciliationCheckpointAges(db: Db): Promise<CheckpointAge[] | null> {
  const [column] = await db<{ ok: boolean }[]>`
    select true as ok
      from information_schema.columns
     where table_schema = current_schema()
       and table_name = ${RECONCILIATION_CHECKPOINT_TABLE}
       and column_name = 'covered_until'
  `;
  if (!column) return null;
  const rows = await db<{ provider: string; endpoint: string; age: number }[]>`
    select provider, endpoint, extract(epoch from now() - covered_until)::float8 as age
      from ${db(RECONCILIATION_CHECKPOINT_TABLE)}
     where covered_until is not null
     order by provider, endpoint
  `;
  return rows.map((r) => ({ provider: r.provider, endpoint: r.endpoint, ageSec: r.age }));
}
