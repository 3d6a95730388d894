import type { EscapableArray } from "postgres";
import { isDataError, type Db, type Tx } from "../db/db.ts";
import type { EventSource, VerifiedEvent } from "../providers/provider.ts";
import { INBOX_CHANNEL } from "./notifier.ts";
import { keepPartitionsAfterSpill } from "./partitions.ts";
import { pausedWhere } from "./pauses.ts";

/**
 * The inbox's idempotency key: the primary key of `webhook_inbox`, (provider, endpoint, event_id)
 * (sql/0027; seed §4). Nothing else decides whether a delivery is a duplicate: no timestamp of the
 * sender's is part of it, whichever path records the event (webhook, batch, backfill, repair).
 */
export interface InboxKey {
  provider: string;
  endpoint: string;
  eventId: string;
}

/**
 * The condition that names one inbox row by its key, as a postgres.js fragment:
 * `(provider, endpoint, event_id) = ($1, $2, $3)`, the columns qualified by `alias` when given (a
 * table alias of `webhook_inbox` or of a CTE with its key columns). The one way statements address a
 * state row (and, with `received_at`, its payload row: sql/0027).
 */
export function keyIs(sql: Db | Tx, key: InboxKey, alias?: string) {
  const column = (name: string) => sql(alias === undefined ? name : `${alias}.${name}`);
  return sql`(${column("provider")}, ${column("endpoint")}, ${column("event_id")}) = (${key.provider}::text, ${key.endpoint}::text, ${key.eventId}::text)`;
}

/**
 * Locks the inbox rows of `keys` (`for key share`, which blocks no worker's update) so that the statement's
 * transaction writes WAL: a commit that wrote WAL waits for the synchronous standby, one that wrote nothing
 * does not (PostgreSQL manual, "Synchronous Replication"). For a delivery found recorded before it is
 * answered `duplicate`: the row it found may be one whose commit stopped waiting for the standby (a
 * cancelled wait leaves it committed on the primary only, yet visible), and this commit, later in the WAL,
 * returns only once the standby has both. Inside a transaction it takes effect at its COMMIT; through the
 * pool it is its own statement and commit.
 */
export async function lockRecorded(sql: Db | Tx, keys: readonly InboxKey[]): Promise<void> {
  if (keys.length === 0) return;
  await sql`
    select 1
      from webhook_inbox
     where (provider, endpoint, event_id) in (select * from unnest(${keys.map((k) => k.provider)}::text[], ${keys.map((k) => k.endpoint)}::text[], ${keys.map((k) => k.eventId)}::text[]))
       for key share
  `;
}

/** LISTEN/NOTIFY channel that wakes workers when a row is queued (see notifier.ts). */
export const NOTIFY_CHANNEL = INBOX_CHANNEL;

/** Retry timing: first delay and cap, ms, for the SQL `webhook_inbox_backoff()` (sql/0003_worker.sql). */
export interface Backoff {
  baseMs: number;
  capMs: number;
}

/**
 * One row as {@link insertInbox} writes it. `settled` writes it processed or ignored at once
 * (`processed_at = now()`: its work commits in the same transaction); null leaves it for a worker.
 * `failed` records an attempt that already failed (hybrid fallback, a refused event): `attempts = 1`,
 * `last_error`, the first backoff, and needs-review at once when `parked`.
 */
export interface InboxRow {
  key: InboxKey;
  type: string;
  /** The payload as JSON text (a jsonb object), or null for an event kept only as `rawBody`. */
  payload: string | null;
  /** The exact verified bytes when the payload is a sanitized copy of them, or the only copy kept. */
  rawBody: string | null;
  /** What the sanitized copy replaced (`payload_sanitized`), or null. */
  replaced: string | null;
  source: EventSource;
  /** The event's own creation time as its sender gives it, Unix seconds (`event_created_at`: data only, not part of the key); null when none. */
  createdAtSec: number | null;
  /** The Stripe account the event belongs to (`webhook_inbox.account`, sql/0021): `acct_…`, or `""` for the platform's own. */
  account: string;
  /** The event's `livemode` (Stripe), stored as the row's `livemode`; null for providers without modes. */
  livemode: boolean | null;
  /** `ignored_mode`: the event's livemode is not its endpoint's mode (recorded, never applied: docs/stripe-connect.md). */
  settled: "processed" | "ignored" | "ignored_mode" | null;
  failed?: { error: string; parked: boolean; backoff: Backoff };
  /** W3C traceparent of the span that recorded it (`traceparent` column), or null. */
  traceparent: string | null;
  /**
   * A row written `processed` (its handler runs in this transaction) that is to be left unprocessed for
   * a worker instead when its endpoint or account is paused (`endpoint_pauses`, sql/0030): decided in the
   * insert statement itself, and reported in {@link InsertedKeys.paused}.
   */
  unlessPaused?: boolean;
}

/**
 * The row a verified event inserts: its payload from the exact verified bytes (or their
 * jsonb-storable copy, with the bytes in `rawBody`: jsonb-text.ts), its source and creation time.
 */
export function inboxRow(key: InboxKey, event: VerifiedEvent, settled: InboxRow["settled"]): InboxRow {
  return {
    key,
    type: event.type,
    payload: event.sanitized?.json ?? event.body,
    rawBody: event.sanitized ? event.body : null,
    replaced: event.sanitized?.replaced ?? null,
    source: event.source ?? "webhook",
    createdAtSec: event.createdAt ? event.createdAt.getTime() / 1000 : null,
    account: event.account ?? "",
    livemode: event.livemode ?? null,
    settled,
    traceparent: event.traceparent ?? null,
  };
}

/**
 * The keys one {@link insertInbox} statement inserted (as {@link keyText}); a key missing from it was
 * already recorded (a duplicate). `spilled`: a payload row went to the default partition of
 * `webhook_inbox_payloads` (its week has no partition yet): the caller, once committed, has
 * partitions.ts `keepPartitionsAfterSpill` create them.
 */
export class InsertedKeys extends Set<string> {
  spilled = false;
  /** Keys of rows written `unlessPaused` that a pause left unprocessed (nothing may be applied for them). */
  paused = new Set<string>();
}

/**
 * The one insert into the inbox: for each row, its state row (`webhook_inbox`, `insert … on conflict
 * (provider, endpoint, event_id) do nothing`) and, for each state row it inserted, in the same
 * statement, its payload row (`webhook_inbox_payloads`, under the state row's key and `received_at`):
 * an event's payload is written only by the delivery that recorded it, and never without its state row.
 * One statement for any number of rows (async group commit sends many, everything else one). When
 * another transaction is inserting the same key, this waits until it commits (a duplicate) or rolls
 * back (inserted): the unique index serializes concurrent duplicates (PostgreSQL manual, INSERT, "ON
 * CONFLICT Clause"; seed §5.4). `rows` must not hold one key twice. Runs on `sql`: the pool (its own
 * transaction) or a transaction handle (inside the inbox transaction).
 * @throws the database error when any row cannot be written; nothing of the statement remains.
 */
export async function insertInbox(sql: Db | Tx, rows: readonly InboxRow[]): Promise<InsertedKeys> {
  // One array per row, in the order of `r`'s columns below. Values arrive untyped (text) unless
  // postgres.js types them (Date, boolean); the casts say what each column is.
  const values = rows.map((r) => [
    r.key.provider,
    r.key.endpoint,
    r.key.eventId,
    r.type,
    r.payload,
    r.rawBody,
    r.replaced,
    r.source,
    r.createdAtSec,
    r.settled,
    r.failed?.error.slice(0, 1000) ?? null,
    r.failed?.parked ?? false,
    r.failed?.backoff.baseMs ?? null,
    r.failed?.backoff.capMs ?? null,
    r.account,
    r.livemode,
    r.traceparent,
    r.unlessPaused === true,
  ]);
  const inserted = await sql<{ provider: string; endpoint: string; event_id: string; spilled: boolean | null; unsettled: boolean }[]>`
    with r as (
      select provider::text, endpoint::text, event_id::text, event_type::text, payload::text::jsonb as payload, raw_body::text,
             payload_sanitized::text, source::text, to_timestamp(created::float8) as created, outcome::text, last_error::text,
             parked::boolean, base_ms::int, cap_ms::int, account::text, livemode::boolean, traceparent::text, unless_paused::boolean
        from (values ${sql(values as unknown as EscapableArray[])})
          as r (provider, endpoint, event_id, event_type, payload, raw_body, payload_sanitized, source, created, outcome, last_error, parked,
                base_ms, cap_ms, account, livemode, traceparent, unless_paused)
    ), state as (
      insert into webhook_inbox (provider, endpoint, event_id, event_type, source, event_created_at, processed_at, outcome, attempts,
                                 last_error, needs_review_at, available_at, account, livemode, traceparent)
      select provider, endpoint, event_id, event_type, source, created,
             case when outcome is not null and not h.paused then now() end, case when not h.paused then outcome end,
             case when last_error is not null then 1 else 0 end, last_error,
             case when parked then now() end,
             case when last_error is not null then now() + webhook_inbox_backoff(1, base_ms, cap_ms) else now() end,
             account, livemode, traceparent
        from r
        -- A row to be applied now whose endpoint or account is paused is recorded for a worker instead.
        cross join lateral (select r.unless_paused and ${pausedWhere(sql, sql`r.endpoint`, sql`r.account`)} as paused) h
      on conflict (provider, endpoint, event_id) do nothing
      returning provider, endpoint, event_id, received_at, processed_at is null as unsettled
    ), payload as (
      insert into webhook_inbox_payloads (provider, endpoint, event_id, received_at, payload, raw_body, payload_sanitized)
      select s.provider, s.endpoint, s.event_id, s.received_at, r.payload, r.raw_body, r.payload_sanitized
        from state s
        join r using (provider, endpoint, event_id)
      returning provider, endpoint, event_id, tableoid = 'webhook_inbox_payloads_default'::regclass as spilled
    )
    select s.provider, s.endpoint, s.event_id, p.spilled, s.unsettled
      from state s
      left join payload p using (provider, endpoint, event_id)
  `;
  const keyOf = (row: (typeof inserted)[number]) => keyText({ provider: row.provider, endpoint: row.endpoint, eventId: row.event_id });
  const keys = new InsertedKeys(inserted.map(keyOf));
  keys.spilled = inserted.some((row) => row.spilled === true);
  // A row written `unlessPaused` is settled unless a pause held it.
  const held = new Set(rows.filter((r) => r.unlessPaused).map((r) => keyText(r.key)));
  for (const row of inserted) if (row.unsettled && held.has(keyOf(row))) keys.paused.add(keyOf(row));
  return keys;
}

/** An inbox key as one string, for maps and sets: its three parts joined by NUL (which none of them can hold). */
export function keyText(key: InboxKey): string {
  return `${key.provider}\u0000${key.endpoint}\u0000${key.eventId}`;
}

/**
 * Records an event that was not applied, after its attempt rolled back, in its own short statement:
 * `attempts = 1`, `last_error` and the first backoff for a worker (hybrid mode's fallback), or parked
 * as needs-review at once when `parked` (a failure no retry can fix: operators see it, the provider
 * gets a 2xx instead of retrying in vain). A payload jsonb refuses even as a sanitized copy is kept as
 * `raw_body` only, parked. Returns false when the key was recorded meanwhile (a duplicate).
 * @throws the database error when the row cannot be written (the caller answers 5xx).
 */
export async function recordUnapplied(
  db: Db,
  key: InboxKey,
  event: VerifiedEvent,
  failure: { error: string; parked: boolean; backoff: Backoff },
): Promise<boolean> {
  const row = { ...inboxRow(key, event, null), failed: failure };
  let inserted: InsertedKeys;
  try {
    inserted = await insertInbox(db, [row]);
  } catch (err) {
    if (!isDataError(err)) throw err;
    inserted = await insertInbox(db, [rawOnlyRow(key, event, failure.error, failure.backoff)]);
  }
  keepPartitionsAfterSpill(db, inserted);
  return inserted.size === 1;
}

/**
 * The row of an event whose own row PostgreSQL refused (a data error, SQLSTATE class 22 or 54: a payload
 * jsonb refuses even as a sanitized copy, a creation time beyond `timestamptz`'s range): no payload, the
 * verified body in `raw_body`, no creation time, parked as needs-review with
 * `error` and a note in `last_error`, so it is kept for an operator and the sender gets a 2xx. Its key
 * is the event's: a key PostgreSQL refuses (a NUL in the id) is refused again.
 */
export function rawOnlyRow(key: InboxKey, event: VerifiedEvent, error: string, backoff: Backoff): InboxRow {
  const note = `${error}; payload cannot be stored as jsonb: kept as raw_body`.slice(0, 300);
  return {
    ...inboxRow(key, event, null),
    payload: null,
    rawBody: event.body,
    replaced: null,
    createdAtSec: null,
    failed: { error: note, parked: true, backoff },
  };
}
