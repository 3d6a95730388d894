import type { Db } from "../db/db.ts";
import { OUTBOX_CHANNEL } from "./dispatcher.ts";

/**
 * Puts parked (needs-review) outbox rows back in the queue after an operator fixed the cause:
 * `needs_review_at` and `attempts` reset, due now, dispatchers notified; `last_error` is kept until
 * the next attempt overwrites it. Only parked, unpublished rows among `ids` are touched. Returns the
 * ids requeued, ascending.
 */
export async function requeueOutbox(db: Db, ids: readonly string[]): Promise<string[]> {
  const rows = await db<{ id: string }[]>`
    with requeued as (
      update outbox
         set needs_review_at = null,
             attempts = 0,
             available_at = now()
       where id = any(${ids as string[]}::bigint[])
         and needs_review_at is not null
         and published_at is null
      returning id
    )
    select id::text as id, pg_notify(${OUTBOX_CHANNEL}, '')::text as notified
      from requeued
     order by requeued.id
  `;
  return rows.map((r) => r.id);
}
