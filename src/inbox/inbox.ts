import { cancelAfter, sqlState, SQLSTATE, type Db, type Tx } from "../db/db.ts";
import { INBOX_CHANNEL } from "./notifier.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import type { PendingQuery, Row } from "postgres";

/** The inbox's idempotency key: primary key of `webhook_inbox`. */
export interface InboxKey {
  provider: string;
  endpoint: string;
  eventId: string;
}

/** How a row is recorded: already settled in this transaction (`processed`, `ignored`), or left for a worker (`null`). */
export type RecordedAs = "processed" | "ignored" | null;

/** LISTEN/NOTIFY channel that wakes workers when a row is queued (see notifier.ts). */
export const NOTIFY_CHANNEL = INBOX_CHANNEL;

/** Retry timing: first delay and cap, ms, for the SQL `webhook_inbox_backoff()` (sql/0003_worker.sql). */
export interface Backoff {
  baseMs: number;
  capMs: number;
}

/**
 * Records a verified event in the inbox: `insert … on conflict do nothing returning`. Returns true
 * when this transaction inserted the row, false when the key already exists (a duplicate). When
 * another transaction is inserting the same key, this waits until it commits (→ false) or rolls
 * back (→ true): the unique index serializes concurrent duplicates (PostgreSQL manual, INSERT,
 * "ON CONFLICT Clause"; seed §5.4).
 *
 * With `as` = processed/ignored the row is written settled (`processed_at = now()`, the transaction's
 * start time): since the inbox row and the business change commit together, this is the same as the
 * seed's later `update … set processed_at`, one round trip shorter. With `null` the row is left
 * unprocessed for a worker (the caller wakes workers after the commit: notifier.ts). Must be called
 * inside the inbox transaction (or as its only statement). The payload is stored from the exact
 * verified bytes, as a jsonb object; for an event with a sanitized copy ({@link storedJson}), from
 * that copy, with the exact bytes in `raw_body` and what was replaced in `payload_sanitized`.
 * `timeoutMs` (optional) cancels the statement when it runs longer, lock waits included (SQLSTATE
 * 57014; nothing was written).
 */
export async function recordEvent(tx: Tx | Db, key: InboxKey, event: VerifiedEvent, as: RecordedAs, timeoutMs?: number): Promise<boolean> {
  const rows = await cancelAfter(tx`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, payload_sanitized, processed_at, outcome, source)
    values (
      ${key.provider}, ${key.endpoint}, ${key.eventId}, ${event.type}, ${storedJson(event)}::text::jsonb, ${rawBody(event)}::text, ${replaced(event)}::text,
      case when ${as}::text is null then null else now() end, ${as}::text, ${sourceOf(event)}
    )
    on conflict (provider, endpoint, event_id) do nothing
    returning 1
  `, timeoutMs);
  return rows.length === 1;
}

/**
 * Hybrid mode, after the in-request attempt rolled back: records the event unprocessed with
 * `attempts = 1`, the error, and the first backoff, so a worker retries it; `permanent` parks it as
 * needs-review at once instead. One statement, its own transaction. No NOTIFY: the row is not due
 * before its backoff, and the worker's poll finds it then. Returns false when the key
 * already exists (a concurrent delivery recorded it meanwhile: a duplicate).
 * @throws the database error when it cannot be written (the caller must then answer 5xx).
 */
export async function recordFailedAttempt(
  db: Db | Tx,
  key: InboxKey,
  event: VerifiedEvent,
  error: string,
  permanent: boolean,
  backoff: Backoff,
): Promise<boolean> {
  const rows = await db`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, payload_sanitized, attempts, last_error, available_at, needs_review_at, source)
    values (
      ${key.provider}, ${key.endpoint}, ${key.eventId}, ${event.type}, ${storedJson(event)}::text::jsonb, ${rawBody(event)}::text, ${replaced(event)}::text,
      1, ${error}, now() + webhook_inbox_backoff(1, ${backoff.baseMs}, ${backoff.capMs}),
      case when ${permanent} then now() end, ${sourceOf(event)}
    )
    on conflict (provider, endpoint, event_id) do nothing
    returning 1
  `;
  return rows.length === 1;
}

/**
 * A statement handler's effect as the inbox statement splices it (the shape of handlers' rendered
 * steps): `ctes`, a non-empty CTE list that may read `inbox`; `wrote`, a boolean expression, true when
 * one of those CTEs wrote a row.
 */
export interface StatementEffect {
  ctes: PendingQuery<Row[]>;
  wrote: PendingQuery<Row[]>;
}

/**
 * Sync mode in one statement: inserts the inbox row settled as `processed` in a CTE named `inbox`
 * (`on conflict do nothing returning 1`) and runs `effect`, a statement handler's rendered steps, in
 * the same statement, which PostgreSQL commits or rolls back as a whole. The final select is the gate
 * of sql/0012, given whether the steps wrote: when the insert found the key
 * already recorded and a step wrote anyway (it did not test the gate), the statement fails with
 * SQLSTATE WI001 and every step's writes roll back. Returns true when this statement inserted the row
 * (and so applied the effect), false for a duplicate: the gate's false, WI001, or any other failure of
 * the statement while the key is recorded (a step that hits a unique violation on a redelivery is a
 * duplicate, not a failure to retry). A concurrent duplicate waits on the unique index for the first
 * delivery, then conflicts.
 * `timeoutMs` (optional) cancels the statement when it runs longer, lock waits included.
 * @throws the statement's error when the key is not recorded (nothing of this attempt remains).
 */
export async function recordAndApply(
  db: Db | Tx,
  key: InboxKey,
  event: VerifiedEvent,
  effect: StatementEffect,
  timeoutMs?: number,
): Promise<boolean> {
  try {
    const [row] = await cancelAfter(recordAndApplyStatement(db, key, event, effect), timeoutMs);
    return row?.inserted === true;
  } catch (err) {
    if (sqlState(err) === SQLSTATE.nothingToApply) return false;
    if (await isRecorded(db, key).catch(() => false)) return false;
    throw err;
  }
}

/**
 * The one statement of {@link recordAndApply}, unsent: one row `{ inserted }`, true when it inserted
 * the inbox row and applied `effect`, false for a duplicate the gate stopped; fails with SQLSTATE WI001
 * when a step wrote for a duplicate. For a caller that runs several in one transaction
 * (receiver/sync-group.ts), where any failure must fail the whole transaction.
 */
export function recordAndApplyStatement(db: Db | Tx, key: InboxKey, event: VerifiedEvent, effect: StatementEffect) {
  return db<{ inserted: boolean }[]>`
    with inbox as (
      insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, payload_sanitized, processed_at, outcome, source)
      values (
        ${key.provider}, ${key.endpoint}, ${key.eventId}, ${event.type}, ${storedJson(event)}::text::jsonb, ${rawBody(event)}::text, ${replaced(event)}::text,
        now(), 'processed', ${sourceOf(event)}
      )
      on conflict (provider, endpoint, event_id) do nothing
      returning 1
    ), ${effect.ctes}
    select case
             when exists (select 1 from inbox) then true
             when not (${effect.wrote}) then false
             else webhook_inbox_ungated()
           end as inserted
  `;
}

/** True when the inbox holds `key` (in any state). */
export async function isRecorded(db: Db | Tx, key: InboxKey): Promise<boolean> {
  const rows = await db`
    select 1
      from webhook_inbox
     where (provider, endpoint, event_id) = (${key.provider}, ${key.endpoint}, ${key.eventId})
  `;
  return rows.length === 1;
}

/**
 * Keeps a verified event that PostgreSQL cannot store as jsonb (SQLSTATE class 22 or 54001 on the
 * payload): as needs-review, with the exact verified body as text in `raw_body`, no payload and
 * `attempts = 1`, so it is acknowledged only once durably recorded and an operator sees it. One
 * statement. Returns false when the key already exists (a duplicate).
 * @throws the database error when even this cannot be written (the caller answers 4xx/5xx).
 */
export async function recordUnstorable(db: Db, key: InboxKey, event: VerifiedEvent, error: string): Promise<boolean> {
  const rows = await db`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, attempts, last_error, needs_review_at, source)
    values (${key.provider}, ${key.endpoint}, ${key.eventId}, ${event.type}, null, ${event.body}, 1, ${error}, now(), ${sourceOf(event)})
    on conflict (provider, endpoint, event_id) do nothing
    returning 1
  `;
  return rows.length === 1;
}

/** The JSON text stored as the payload: the exact body, or its jsonb-storable copy (VerifiedEvent.sanitized). */
export function storedJson(event: VerifiedEvent): string {
  return event.sanitized?.json ?? event.body;
}

/** `raw_body` of a row with a sanitized payload: the exact verified bytes; null otherwise (the payload is them). */
export function rawBody(event: VerifiedEvent): string | null {
  return event.sanitized ? event.body : null;
}

/** The `source` column of a row this event inserts: `webhook` unless the event says otherwise. */
export function sourceOf(event: VerifiedEvent): string {
  return event.source ?? "webhook";
}

/** `payload_sanitized`: what the stored copy replaced, or null. */
export function replaced(event: VerifiedEvent): string | null {
  return event.sanitized?.replaced ?? null;
}
