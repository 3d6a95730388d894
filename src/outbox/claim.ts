import type { Db } from "../db/db.ts";

/** One outbox row a dispatcher claimed, with the fencing token of this claim. */
export interface OutboxMessage {
  /** `outbox.id` (a bigint, as its decimal text). */
  id: string;
  /**
   * Stable message id for receivers to deduplicate on, the same on every retry and for a row re-created
   * after a database failover: `msg_` + 32 hex digits of sha256 over the row's (account, aggregate_type,
   * aggregate_id, event_type, message_key), set when the row is written (sql/0024_failover.sql); rows
   * written before that migration keep `msg_outbox_<id>`.
   */
  messageId: string;
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  payload: Record<string, unknown>;
  /** When the business transaction wrote the row. */
  createdAt: Date;
  /** `attempts` after this claim's increment (1 on the first delivery). */
  attempt: number;
  /**
   * Fencing token: `nextval('outbox_claim_token_seq')` taken by this claim, strictly greater than the
   * token of every earlier claim of any row. Marking the row published or failed requires it.
   */
  token: bigint;
  /**
   * W3C traceparent sent to the sink (header `traceparent`): the dispatcher's send span when tracing
   * is on, else the one stored on the row by the transaction that wrote it (sql/0023); undefined: none.
   */
  traceparent?: string;
}

/** Options of {@link claimOutboxBatch}. */
export interface OutboxClaimOptions {
  /** Rows to claim at most. */
  limit: number;
  /** Lease, ms: the row is invisible to other dispatchers until then (its `available_at`). */
  leaseMs: number;
  /** Attempt limit; a due row that already used them is parked as needs-review instead. */
  maxAttempts: number;
  /**
   * Per-aggregate order: claim a row only when no earlier (lower `id`) row of the same
   * (account, aggregate_type, aggregate_id) is unpublished, parked ones included. Default false.
   */
  ordered?: boolean;
}

/**
 * Claims up to `limit` due outbox rows in one short transaction, like the inbox worker's
 * `claimBatch`: unpublished, unparked rows with `available_at <= now()`, oldest due first, locked
 * with `FOR UPDATE SKIP LOCKED` (PostgreSQL manual, SELECT, "The Locking Clause"). Each claimed row
 * counts the attempt, takes a new fencing token and has `available_at` pushed out by the lease before
 * anything is delivered, so a dispatcher that dies mid-delivery has still used an attempt. A picked
 * row that has used all attempts (its last dispatcher never reported) is parked as needs-review in the
 * same statement. With `ordered`, only the head (lowest unpublished `id`) of each aggregate of an
 * account can be picked, so one aggregate's rows are delivered one after another in `id` order.
 */
export async function claimOutboxBatch(db: Db, options: OutboxClaimOptions): Promise<OutboxMessage[]> {
  const ordered = options.ordered ?? false;
  const rows = await db<(Omit<OutboxMessage, "token" | "traceparent"> & { token: string; traceparent: string | null })[]>`
    with picked as (
      select o.id, o.attempts
        from outbox o
       where o.published_at is null
         and o.needs_review_at is null
         and o.available_at <= now()
         and (not ${ordered}::boolean or not exists (
               select 1
                 from outbox e
                where (e.account, e.aggregate_type, e.aggregate_id) = (o.account, o.aggregate_type, o.aggregate_id)
                  and e.id < o.id
                  and e.published_at is null
             ))
       order by o.available_at, o.id
       limit ${options.limit}
         for update skip locked
    ), parked as (
      -- A new fencing token here too: the dispatcher whose lease expired may still report back, and
      -- must find its token gone (stale) rather than overwrite the parked row or try to publish it.
      update outbox o
         set needs_review_at = now(),
             claim_token = nextval('outbox_claim_token_seq'),
             last_error = left(coalesce(o.last_error || '; ', '') || 'attempt limit ' || ${options.maxAttempts}::int
                          || ' reached: the last attempt never reported back (dispatcher killed or lease expired)', 1000)
        from picked p
       where p.attempts >= ${options.maxAttempts}
         and o.id = p.id
    )
    update outbox o
       set attempts = o.attempts + 1,
           claim_token = nextval('outbox_claim_token_seq'),
           available_at = now() + ${options.leaseMs} * interval '1 millisecond'
      from picked p
     where p.attempts < ${options.maxAttempts}
       and o.id = p.id
    returning o.id::text as id, coalesce(o.message_id, 'msg_outbox_' || o.id) as "messageId", o.aggregate_type as "aggregateType",
              o.aggregate_id as "aggregateId", o.event_type as "eventType", o.payload, o.created_at as "createdAt",
              o.attempts as attempt, o.claim_token::text as token, o.traceparent
  `;
  return rows
    .map(({ traceparent, ...r }) => ({ ...r, token: BigInt(r.token), ...(traceparent ? { traceparent } : {}) }))
    .sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
}
