import type { Db, Tx } from "../db/db.ts";
import { whereRows, type RowFilter } from "./filter.ts";

/**
 * The needs-review rows a filter names at one moment: how many, and a digest of exactly which
 * (md5 of their sorted (provider, endpoint, event_id) keys as JSON). Two selections with the same
 * digest are the same rows.
 */
export interface Selection {
  count: number;
  /** 32 hex digits. */
  digest: string;
}

/** What {@link applyToSelection} did: applied to exactly the confirmed rows, or nothing because the set changed. */
export type SelectionOutcome<T> = { applied: true; result: T } | { applied: false; now: Selection };

/**
 * The needs-review rows matching `filter` (whatever `filter.state` says) as a {@link Selection}: the
 * count and digest a bulk action's confirmation shows and carries to {@link applyToSelection}.
 */
export async function selectNeedsReview(db: Db | Tx, filter: RowFilter, lock = false): Promise<Selection> {
  const [row] = await db<{ count: number; digest: string }[]>`
    with picked as (
      select provider, endpoint, event_id
        from webhook_inbox_state
       where ${whereRows(db, { ...filter, state: "needs_review" })}
       order by provider, endpoint, event_id
       ${lock ? db`for update` : db``}
    )
    select count(*)::int as count,
           md5(coalesce(jsonb_agg(jsonb_build_array(provider, endpoint, event_id) order by provider, endpoint, event_id), '[]'::jsonb)::text) as digest
      from picked
  `;
  return row ?? { count: 0, digest: "" };
}

/**
 * Runs `apply` on the needs-review rows matching `filter` only if they are still exactly the rows
 * an operator confirmed (`expected`): in one transaction it locks them (`FOR UPDATE`, so no worker,
 * requeue or resolve changes them meanwhile), recomputes the selection and compares count and digest.
 * Rows that arrived, left or were swapped since the confirmation make it return `{ applied: false,
 * now }` with nothing changed; otherwise `apply(tx)` runs in that transaction on the locked rows.
 * @throws whatever `apply` throws, after rolling back.
 */
export async function applyToSelection<T>(
  db: Db,
  filter: RowFilter,
  expected: Selection,
  apply: (tx: Tx) => Promise<T>,
): Promise<SelectionOutcome<T>> {
  return db.begin(async (tx): Promise<SelectionOutcome<T>> => {
    const now = await selectNeedsReview(tx, filter, true);
    if (now.count !== expected.count || now.digest !== expected.digest) return { applied: false, now };
    return { applied: true, result: await apply(tx) };
  }) as Promise<SelectionOutcome<T>>;
}
