import type { Db } from "../db/db.ts";
import type { InboxKey } from "../inbox/inbox.ts";

/** A row a worker claimed: its key, type, and the attempt number this claim counted. */
export interface Claim extends InboxKey {
  eventType: string;
  /**
   * `attempts` after this claim's increment. It doubles as a fencing token: a worker records a
   * failure only while the row still carries its number, so a worker whose lease expired and whose
   * row was claimed again cannot push back the new owner's lease.
   */
  attempt: number;
  /** The row's `account` (sql/0021): the connected account the event belongs to, `""` for the platform's own. */
  account: string;
  /** When this claim's lease ends, ms since the epoch (this process's clock, taken before the claim was sent). */
  leaseEndsAt: number;
  /** The stored event (never changes while unprocessed), so processing needs no second read. */
  payload?: Record<string, unknown> | null;
  /** For a row kept without a payload (0006: jsonb refused it), its exact verified body. */
  rawBody?: string | null;
  /**
   * Why the row must be parked again instead of applied: its stored event type is not the one sent
   * (sanitizing replaced a \u0000 or lone surrogate in it by U+FFFD, jsonb-text.ts), so no handler,
   * and no "ignored" either, fits it. Undefined for every other row.
   */
  refusal?: string;
  /** W3C traceparent of the span that recorded the row (sql/0023), for the worker's span link; null when none. */
  traceparent?: string | null;
}

/** The last_error of a row whose type sanitizing changed (the receiver parks it with the same opening words). */
const TYPE_CHANGED =
  "Event type holds characters PostgreSQL cannot store: recorded with them replaced, not applied (requeueing cannot fix it: handle it by hand, then bun run inbox resolve)";

/** Options of {@link claimBatch}. */
export interface ClaimOptions {
  /** Rows to claim at most. */
  limit: number;
  /**
   * Rows already tried (`attempts > 0`: a failure, or a worker that died holding them) to claim at most,
   * oldest first; default `limit`. The worker takes one at a time, and none while one is in flight, so
   * a retried row is never in a batch and never runs beside another (worker/process-batch.ts): an
   * event that kills its worker takes only itself to the attempt limit.
   */
  retried?: number;
  /**
   * Rows never tried that need a Stripe API read first (Fetcher `scope`: every row of `providers`, and
   * rows at `endpoints` as `provider/endpoint`), at most `limit` of them, oldest first; default none
   * singled out. The worker takes one per free slot, so the API reads a claim starts stay what its
   * slots and the rate limit can finish within their leases.
   */
  reads?: { providers: readonly string[]; endpoints: readonly string[]; limit: number };
  /** Lease, ms: the row is invisible to other workers until then (its `available_at`). */
  leaseMs: number;
  /** Attempt limit; a due row that already used them is parked as needs-review instead. */
  maxAttempts: number;
  /**
   * Providers whose rows this worker can process (it has their handler table, and an API reader where
   * they need one); other rows are left for workers that can. Undefined: every provider.
   */
  providers?: readonly string[];
  /** Told about rows this claim parked (so the worker can log them). */
  onParked?: (rows: (InboxKey & { eventType: string; attempts: number })[]) => void;
}

/**
 * Claims up to `limit` due rows in one short transaction (seed §6 `claim_next`, several at once):
 * picks unprocessed, unparked rows with `available_at <= now()` oldest first with
 * `FOR UPDATE SKIP LOCKED` (PostgreSQL manual, SELECT, "The Locking Clause"), counts the attempt and
 * pushes `available_at` out by the lease before any work is done, so a process that dies mid-work
 * has still used up an attempt. Of rows already tried at most `retried` are claimed, and of rows that
 * need an API read at most `reads.limit`. A picked row that has used all attempts (its last worker died
 * without reporting) is parked as needs-review in the same statement rather than claimed. Only rows of
 * `providers` are picked: a worker never takes a row it cannot process.
 */
export async function claimBatch(db: Db, options: ClaimOptions): Promise<Claim[]> {
  const leaseEndsAt = Date.now() + options.leaseMs;
  const reads = options.reads ?? { providers: [], endpoints: [], limit: 0 };
  type Row = Omit<Claim, "attempt" | "leaseEndsAt" | "refusal"> & { claimed: boolean; attempts: number; typeChanged: boolean | null };
  const rows = await db<Row[]>`
    with picked as (
      select provider, endpoint, event_id, attempts, available_at
        from webhook_inbox
       where processed_at is null
         and needs_review_at is null
         and available_at <= now()
         and (${options.providers === undefined} or provider = any(${(options.providers ?? []) as string[]}::text[]))
       order by available_at
       limit ${options.limit}
         for update skip locked
    ), kinds as (
      select p.*, p.provider = any(${reads.providers as string[]}::text[])
                  or p.provider || '/' || p.endpoint = any(${reads.endpoints as string[]}::text[]) as reads
        from picked p
    ), chosen as (
      -- Rows to park, rows never tried (of those that need an API read at most reads.limit), and at most
      -- options.retried rows already tried; the others stay due (their locks end with this statement).
      select provider, endpoint, event_id, attempts from kinds
       where attempts >= ${options.maxAttempts} or (attempts = 0 and not reads)
      union all
      (select provider, endpoint, event_id, attempts from kinds where attempts = 0 and reads order by available_at limit ${reads.limit})
      union all
      (select provider, endpoint, event_id, attempts from kinds
        where attempts > 0 and attempts < ${options.maxAttempts}
        order by available_at
        limit ${options.retried ?? options.limit})
    ), parked as (
      update webhook_inbox w
         set needs_review_at = now(),
             last_error = left(coalesce(w.last_error || '; ', '') || 'attempt limit ' || ${options.maxAttempts}::int
                          || ' reached with no outcome recorded for the last attempt (its worker was killed or its lease expired,'
                          || ' or the row was made due again without resetting attempts: use "inbox requeue")', 1000)
        from chosen p
       where p.attempts >= ${options.maxAttempts}
         and (w.provider, w.endpoint, w.event_id) = (p.provider, p.endpoint, p.event_id)
      returning w.provider, w.endpoint, w.event_id, w.event_type, w.attempts
    ), claimed as (
      update webhook_inbox w
         set attempts = w.attempts + 1,
             available_at = now() + ${options.leaseMs} * interval '1 millisecond'
        from chosen p
       where p.attempts < ${options.maxAttempts}
         and (w.provider, w.endpoint, w.event_id) = (p.provider, p.endpoint, p.event_id)
      returning w.provider, w.endpoint, w.event_id, w.event_type, w.attempts, w.received_at, w.account, w.traceparent
    )
    -- Each claimed row's payload: its key and received_at name one payload row in one partition.
    select true as claimed, c.provider, c.endpoint, c.event_id as "eventId", c.event_type as "eventType", c.attempts, p.payload,
           case when p.payload is null then p.raw_body end as "rawBody",
           -- Sanitizing writes U+FFFD (chr(65533)); a row kept from its raw body may have had it done.
           (p.payload_sanitized is not null or p.payload is null) and strpos(c.event_type, chr(65533)) > 0 as "typeChanged",
           c.account, c.traceparent
      from claimed c
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
    union all
    select false, provider, endpoint, event_id, event_type, attempts, null, null, null, null, null from parked
  `;
  const parked = rows.filter((r) => !r.claimed);
  if (parked.length > 0)
    options.onParked?.(
      parked.map(({ provider, endpoint, eventId, eventType, attempts }) => ({ provider, endpoint, eventId, eventType, attempts })),
    );
  return rows
    .filter((r) => r.claimed)
    .map(({ claimed: _, attempts, typeChanged, ...r }) => ({
      ...r,
      attempt: attempts,
      leaseEndsAt,
      ...(typeChanged ? { refusal: TYPE_CHANGED } : {}),
    }));
}
