import { cancelAfter, isPermanent, sqlState, SQLSTATE, type Db, type Tx } from "../db/db.ts";
import type { Claim } from "./claim.ts";
import type { HandlerTable, StatementBuilder } from "../handlers/handler-table.ts";
import type { Backoff } from "../inbox/inbox.ts";
import { jsonbCopy, type JsonbCopy } from "../providers/jsonb-text.ts";
import { subjectOf } from "../providers/registry.ts";
import { describeError, PermanentError } from "../errors.ts";

/** What one claimed row came to. `skipped`: another worker had processed it meanwhile. */
export type WorkOutcome = "processed" | "ignored" | "skipped" | "failed" | "needs_review";

/** Options of {@link processClaimed}. */
export interface ProcessOptions {
  /** The handler table for a row's provider and endpoint; undefined parks the row (no code for it). */
  handlersFor: (provider: string, endpoint: string) => HandlerTable | undefined;
  /** Transaction-local `statement_timeout`, ms; must be shorter than the lease. */
  timeoutMs: number;
  maxAttempts: number;
  backoff: Backoff;
}

/**
 * Locks the claimed row (`FOR UPDATE`) and re-checks that it is still unprocessed and not parked: another
 * worker, an operator's resolve or a redelivery may have settled it since the claim. Returns its stored
 * payload and raw body, or undefined when it is settled (the caller skips it). Run inside the
 * transaction that applies the row.
 */
export async function lockUnsettled(tx: Tx, claim: Claim): Promise<{ payload: Record<string, unknown> | null; raw_body: string | null } | undefined> {
  const [row] = await tx<{ payload: Record<string, unknown> | null; raw_body: string | null }[]>`
    select payload, raw_body
      from webhook_inbox
     where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
       and processed_at is null
       and needs_review_at is null
       for update
  `;
  return row;
}

/**
 * Processes one claimed row in its own transaction (seed §6 `process_claimed`): sets a local
 * `statement_timeout`, locks the row with `FOR UPDATE` (not SKIP LOCKED: a row briefly locked by
 * another worker's claim must be waited for, not skipped) and re-checks that it is still unprocessed,
 * runs the handler, marks it processed, commits. A late worker whose lease expired finds the row
 * processed and does nothing. On failure the transaction rolls back and {@link recordFailure} stores
 * the error and the next attempt time. Returns the outcome and the error text on failure; never throws
 * for handler errors. A failure to record the failure is thrown (the lease then expires and the row
 * is claimed again).
 */
export async function processClaimed(db: Db, claim: Claim, options: ProcessOptions): Promise<{ outcome: WorkOutcome; error?: string }> {
  try {
    if (claim.refusal) throw new PermanentError(claim.refusal);
    const table = options.handlersFor(claim.provider, claim.endpoint);
    const handler = table?.[claim.eventType];
    if (handler?.statement) return { outcome: await processInOneStatement(db, claim, handler.statement, options.timeoutMs) };
    const outcome = await db.begin(async (tx): Promise<WorkOutcome> => {
      await tx`select set_config('statement_timeout', ${String(options.timeoutMs)}, true)`;
      const row = await lockUnsettled(tx, claim);
      if (!row) return "skipped";
      if (!table) throw new PermanentError(`No handler table for ${claim.provider}/${claim.endpoint}`);
      const stored = storedEvent(row.payload, row.raw_body);
      if (handler) {
        await handler(tx, subjectOf(claim.provider, stored.payload).object, {
          provider: claim.provider,
          endpoint: claim.endpoint,
          eventId: claim.eventId,
          eventType: claim.eventType,
        });
      }
      const outcome = handler ? "processed" : "ignored";
      await tx`
        update webhook_inbox
           set processed_at = now(),
               outcome = ${outcome},
               last_error = null
               ${writeCopy(tx, stored.copy)}
         where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
      `;
      return outcome;
    });
    return { outcome };
  } catch (err) {
    const error = describeError(err);
    const parked = await recordFailure(db, claim, error, isPermanent(err), options);
    return { outcome: parked ? "needs_review" : "failed", error };
  }
}

/**
 * The same as the transaction above, for a {@link StatementBuilder} handler, in ONE statement (its own
 * transaction): `inbox` locks the row `FOR UPDATE` and re-checks it is unprocessed and unparked (a
 * concurrent worker's row lock is waited for, then the row is re-read), the handler's CTEs apply only
 * when it did, and `done` marks it processed. The payload comes with the claim. The timeout cancels
 * the statement from the client (postgres.js `cancel()`, PostgreSQL's cancel request): SQLSTATE 57014
 * like `statement_timeout`. `skipped` when the re-check found the row settled (if a step wrote anyway,
 * the statement fails with WI001 and its writes roll back), or when the statement failed and the row is
 * settled meanwhile (a step's unique violation against the other worker's commit is not a failure). A cancel that races the statement's own completion can at worst cancel the
 * next statement on that connection, which is then recorded as a failed attempt and retried: safe.
 */
async function processInOneStatement(db: Db, claim: Claim, build: StatementBuilder, timeoutMs: number): Promise<WorkOutcome> {
  let { payload, rawBody } = claim;
  if (payload === undefined) {
    const [row] = await db<{ payload: Record<string, unknown> | null; raw_body: string | null; processed: boolean }[]>`
      select payload, raw_body, processed_at is not null as processed
        from webhook_inbox
       where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
    `;
    if (!row || row.processed) return "skipped";
    payload = row.payload;
    rawBody = row.raw_body;
  }
  try {
    const [result] = await cancelAfter(claimedStatement(db, claim, build, payload, rawBody), timeoutMs);
    return result?.applied ? "processed" : "skipped";
  } catch (err) {
    if (sqlState(err) === SQLSTATE.nothingToApply) return "skipped";
    if (await isSettled(db, claim).catch(() => false)) return "skipped";
    throw err;
  }
}

/** True when the claimed row is already processed (by another worker whose statement committed first). */
async function isSettled(db: Db, claim: Claim): Promise<boolean> {
  const rows = await db`
    select 1
      from webhook_inbox
     where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
       and processed_at is not null
  `;
  return rows.length === 1;
}

/**
 * The one statement that applies a claimed row with a {@link StatementBuilder} handler, on `sql` (the
 * pool, or a transaction when several rows share a commit): `inbox` locks the row `FOR UPDATE` and
 * re-checks it is still unprocessed and unparked, the handler's steps (`h_<name>` CTEs) run, `done`
 * marks it processed. Yields one row `{ applied }`: false when another worker had already finished the
 * row and no step wrote; if a step wrote anyway (it did not test the gate), the final select (the
 * gate of sql/0012) fails the statement with SQLSTATE WI001 so no write survives (in a batch, the
 * whole batch then rolls back and is redone row by row).
 * A row kept with only its raw body is applied from its jsonb-storable copy ({@link storedEvent}),
 * which `done` stores as its payload.
 * @throws PermanentError when the row has neither a payload nor a raw body that a copy can fix, or
 *   the handler's validation refuses the event (thrown before anything is sent).
 */
export function claimedStatement(
  sql: Db | Tx,
  claim: Claim,
  build: StatementBuilder,
  payload: Record<string, unknown> | null | undefined,
  rawBody?: string | null,
) {
  const stored = storedEvent(payload, rawBody);
  const context = { provider: claim.provider, endpoint: claim.endpoint, eventId: claim.eventId, eventType: claim.eventType };
  const steps = build(sql, subjectOf(claim.provider, stored.payload).object, context);
  return sql<{ applied: boolean }[]>`
    with inbox as (
      select 1
        from webhook_inbox
       where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
         and processed_at is null
         and needs_review_at is null
         for update
    ), ${steps.ctes},
    done as (
      update webhook_inbox
         set processed_at = now(),
             outcome = 'processed',
             last_error = null
             ${writeCopy(sql, stored.copy)}
       where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
         and exists (select 1 from inbox)
    )
    select case
             when exists (select 1 from inbox) then true
             when not (${steps.wrote}) then false
             else webhook_inbox_ungated()
           end as applied
  `;
}

/**
 * The event a claimed row is applied from: its payload; or, for a row kept with only its raw body
 * because jsonb refused it (0006, rows parked before 0010 and requeued), the body's jsonb-storable
 * copy (jsonb-text.ts), which the settling update stores as the payload with `payload_sanitized`.
 * @throws PermanentError when there is no payload and no copy can fix the raw body (a number beyond
 *   numeric's range, nesting too deep: no retry helps; an operator resolves it).
 */
export function storedEvent(
  payload: Record<string, unknown> | null | undefined,
  rawBody: string | null | undefined,
): { payload: Record<string, unknown>; copy?: JsonbCopy } {
  if (payload) return { payload };
  const copy = rawBody ? jsonbCopy(rawBody) : undefined;
  if (!copy)
    throw new PermanentError(
      "Cannot process: the event has no jsonb payload and its raw body holds no \\u0000 or lone surrogate to replace (a number out of range or nesting too deep?); resolve it by hand",
    );
  return { payload: JSON.parse(copy.json) as Record<string, unknown>, copy };
}

/** The `set` items that store a row's sanitized copy as its payload; nothing when there is none. */
function writeCopy(sql: Db | Tx, copy: JsonbCopy | undefined) {
  return copy ? sql`, payload = ${copy.json}::text::jsonb, payload_sanitized = ${copy.replaced}::text` : sql``;
}

/**
 * Records a failed attempt after its rollback, in its own short transaction (graphile-worker's
 * `failJobs`): `last_error`, `available_at` pushed out by the SQL backoff, and needs-review when the
 * error is permanent or the attempt limit is reached. Touches the row only while it is unprocessed
 * and still carries this claim's attempt number (the fencing token), so it never disturbs a row
 * another worker finished or re-claimed. Returns true when the row is now needs-review.
 */
export async function recordFailure(
  db: Db,
  claim: Claim,
  error: string,
  permanent: boolean,
  options: Pick<ProcessOptions, "maxAttempts" | "backoff">,
): Promise<boolean> {
  const [row] = await db<{ parked: boolean }[]>`
    update webhook_inbox
       set last_error = ${error},
           available_at = now() + webhook_inbox_backoff(attempts, ${options.backoff.baseMs}, ${options.backoff.capMs}),
           needs_review_at = case when ${permanent} or attempts >= ${options.maxAttempts} then now() end
     where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
       and processed_at is null
       and attempts = ${claim.attempt}
    returning needs_review_at is not null as parked
  `;
  return row?.parked ?? false;
}
