import type { EscapableArray } from "postgres";
import { cancelAfter, type Db } from "../db/db.ts";
import { rawBody, replaced, sourceOf, storedJson, type InboxKey, type RecordedAs } from "./inbox.ts";
import type { VerifiedEvent } from "../providers/provider.ts";

/** One row of {@link recordEvents}: the key, the verified event, and how it is recorded (as in `recordEvent`). */
export interface InboxEntry {
  key: InboxKey;
  event: VerifiedEvent;
  as: RecordedAs;
}

/**
 * Records several verified events in one statement (one transaction, one commit): a multi-row
 * `insert … on conflict do nothing returning` that writes each row exactly as `recordEvent` writes
 * it (the payload from the verified bytes or their sanitized copy, `raw_body`, `payload_sanitized`,
 * and `processed_at = now()` when `as` is set, and `source`). Returns the {@link keyText} of every key this
 * statement inserted; a key missing from it was already recorded (a duplicate). `entries` must not
 * hold one key twice (the statement would insert the first and report the second as inserted too).
 * `timeoutMs` (optional) cancels the statement when it runs longer, lock waits included.
 * @throws the database error when any row cannot be written (SQLSTATE 57014 when cancelled at
 *   `timeoutMs`): nothing of the statement remains.
 */
export async function recordEvents(db: Db, entries: readonly InboxEntry[], timeoutMs?: number): Promise<Set<string>> {
  // One array per row, in the order of `entry`'s columns below; the values arrive untyped (text), the casts are recordEvent's.
  // (null is sent as SQL NULL; the typings of the values helper leave it out.)
  const rows = entries.map(({ key, event, as }) => [
    key.provider,
    key.endpoint,
    key.eventId,
    event.type,
    storedJson(event),
    rawBody(event),
    replaced(event),
    as,
    sourceOf(event),
  ]);
  const inserted = await cancelAfter(db<InboxKeyRow[]>`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, payload_sanitized, processed_at, outcome, source)
    select provider, endpoint, event_id, event_type, payload::text::jsonb, raw_body::text, payload_sanitized::text,
           case when outcome::text is null then null else now() end, outcome::text, source::text
      from (values ${db(rows as unknown as EscapableArray[])}) as entry (provider, endpoint, event_id, event_type, payload, raw_body, payload_sanitized, outcome, source)
    on conflict (provider, endpoint, event_id) do nothing
    returning provider, endpoint, event_id
  `, timeoutMs);
  return new Set(inserted.map((row) => keyText({ provider: row.provider, endpoint: row.endpoint, eventId: row.event_id })));
}

interface InboxKeyRow {
  provider: string;
  endpoint: string;
  event_id: string;
}

/** An inbox key as one string, for maps and sets: its three parts joined by NUL (which none of them can hold). */
export function keyText(key: InboxKey): string {
  return `${key.provider}\u0000${key.endpoint}\u0000${key.eventId}`;
}
