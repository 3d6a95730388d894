import type { Tx } from "./db.ts";
import type { VerifiedEvent } from "./provider.ts";

/** The inbox's idempotency key: primary key of `webhook_inbox`. */
export interface InboxKey {
  provider: string;
  endpoint: string;
  eventId: string;
}

/** How a row is recorded: already settled in this transaction (`processed`, `ignored`), or left for a worker (`null`). */
export type RecordedAs = "processed" | "ignored" | null;

/**
 * Records a verified event in the inbox: `insert … on conflict do nothing returning`. Returns true
 * when this transaction inserted the row, false when the key already exists (a duplicate). When
 * another transaction is inserting the same key, this waits until it commits (→ false) or rolls
 * back (→ true): the unique index serializes concurrent duplicates (PostgreSQL manual, INSERT,
 * "ON CONFLICT Clause"; seed §5.4).
 *
 * With `as` = processed/ignored the row is written settled (`processed_at = now()`, the transaction's
 * start time): since the inbox row and the business change commit together, this is the same as the
 * seed's later `update … set processed_at`, one round trip shorter. Must be called inside the inbox
 * transaction. The payload is stored from the exact verified bytes, as a jsonb object.
 */
export async function recordEvent(tx: Tx, key: InboxKey, event: VerifiedEvent, as: RecordedAs): Promise<boolean> {
  const rows = await tx`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, processed_at, outcome)
    values (
      ${key.provider}, ${key.endpoint}, ${key.eventId}, ${event.type}, ${event.body}::text::jsonb,
      case when ${as}::text is null then null else now() end, ${as}::text
    )
    on conflict (provider, endpoint, event_id) do nothing
    returning 1
  `;
  return rows.length === 1;
}
