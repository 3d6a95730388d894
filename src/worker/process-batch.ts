import type { Claim } from "./claim.ts";
import { cancelAfter, type Db, type Tx } from "../db/db.ts";
import { claimedStatement, processClaimed, type ProcessOptions, type WorkOutcome } from "./process-claimed.ts";
import { describeError } from "../errors.ts";
import { subjectOf } from "../providers/registry.ts";

/** What one row of a batch came to; `error` as {@link processClaimed} reports it. */
export interface BatchResult {
  claim: Claim;
  outcome: WorkOutcome;
  error?: string;
  /** True when the row was applied in the shared commit; false when it was processed on its own. */
  batched: boolean;
  /** Why its batch rolled back, when the row was redone on its own after that (class, SQLSTATE, message). */
  batchError?: string;
}

interface Planned {
  claim: Claim;
  /** Lock-order key: the business key of the event's subject (its provider's `subject`), else its event id. */
  key: string;
  run: (tx: Tx) => ReturnType<typeof claimedStatement>;
  ignored: boolean;
}

/**
 * Processes several claimed rows in ONE transaction, so they share one commit (one WAL flush instead
 * of one per row): graphile-worker's batched completion, for the inbox. Each row is the same one
 * statement {@link processClaimed} runs (`FOR UPDATE` re-check, handler CTEs, `processed_at`), run in
 * ascending order of the business key its provider reads from the event (`Subject.key`), so two workers' batches take row locks in the same
 * order and do not deadlock each other. A row without a
 * one-statement handler (see `statementHandler`), or whose handler refuses it before any SQL is sent,
 * is processed on its own with {@link processClaimed}. Rows of a type with no handler are marked
 * `ignored` in the shared commit.
 *
 * Per-event isolation: if any statement of the batch fails (handler error, refusal, deadlock, its
 * time bound), the transaction rolls back and EVERY row of it is processed again on its own with
 * {@link processClaimed}, so a failing event records its own failure and never costs another event its
 * outcome, only a second try in the same claim (its attempt is not counted again). Savepoints per row
 * were not used: they add two round trips per event to save a rare redo.
 *
 * Time: `options.timeoutMs` bounds the whole call (below the lease): the shared attempt may use half
 * of it, and each row processed on its own gets an equal share of the rest (at least half of
 * `timeoutMs` divided by the number of rows). A single row gets all of it.
 * Never throws for handler errors; a failure to record a failure is reported as `failed`.
 */
export async function processBatch(db: Db, claims: readonly Claim[], options: ProcessOptions): Promise<BatchResult[]> {
  const planned: Planned[] = [];
  const single: Claim[] = [];
  for (const claim of claims) {
    const plan = planRow(db, claim, options);
    if (plan) planned.push(plan);
    else single.push(claim);
  }
  // One time budget for everything below, so a batch never outlives its lease: the shared attempt gets
  // half, and each row then processed on its own an equal share of what is left (a row stuck on a
  // lock cannot starve the rows after it).
  const deadline = Date.now() + options.timeoutMs;
  const results: BatchResult[] = [];
  if (planned.length === 1) single.push(...planned.splice(0).map((p) => p.claim));
  let redo: { claim: Claim; batchError?: string }[] = [];
  if (planned.length > 1) {
    planned.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    let batchError: string | undefined;
    const shared = await applyTogether(db, planned, Math.floor(options.timeoutMs / 2)).catch((err: unknown) => {
      batchError = describeError(err);
      return undefined;
    });
    if (shared) results.push(...shared);
    else redo = planned.map((p) => ({ claim: p.claim, batchError }));
  }
  const alone: { claim: Claim; batchError?: string }[] = [...redo, ...single.map((claim) => ({ claim }))];
  for (const [i, { claim, batchError }] of alone.entries()) {
    const share = Math.max(1, Math.floor((deadline - Date.now()) / (alone.length - i)));
    const result = await processClaimed(db, claim, { ...options, timeoutMs: share }).catch((err: unknown) => ({
      outcome: "failed" as const,
      error: describeError(err),
    }));
    results.push({ claim, ...result, batched: false, ...(batchError ? { batchError } : {}) });
  }
  return results;
}

/** The row's statement, or undefined when it must be processed on its own. */
function planRow(db: Db, claim: Claim, options: ProcessOptions): Planned | undefined {
  const table = options.handlersFor(claim.provider, claim.endpoint);
  if (!table || !claim.payload || claim.refusal) return undefined;
  const handler = table[claim.eventType];
  const key = lockKey(claim, claim.payload);
  if (!handler) return { claim, key, run: (tx) => ignoreStatement(tx, claim), ignored: true };
  const build = handler.statement;
  if (!build) return undefined;
  try {
    // Validation runs while the fragment is built (postgres.js sends a query only once awaited): a
    // refused event is left to processClaimed, which parks it.
    claimedStatement(db, claim, build, claim.payload);
  } catch {
    return undefined;
  }
  return { claim, key, run: (tx) => claimedStatement(tx, claim, build, claim.payload), ignored: false };
}

/** The row's business key for lock ordering; its event id when its envelope names none or cannot be read. */
function lockKey(claim: Claim, payload: Record<string, unknown>): string {
  try {
    return subjectOf(claim.provider, payload).key ?? claim.eventId;
  } catch {
    return claim.eventId; // the row is then refused and processed on its own (or ignored)
  }
}

/**
 * Runs the planned statements one after another in one transaction; rejects (rolled back) if any fails
 * or the batch exceeds `timeoutMs`. The bound is enforced by cancelling the running statement from the
 * client (PostgreSQL's cancel request, SQLSTATE 57014), as for a single row, and per statement by a
 * transaction-local `statement_timeout` that still holds if this process dies. Statements are awaited in
 * turn rather than pipelined: postgres.js cancels a pipelined statement only once it becomes active,
 * which could land its cancel request on a later statement of the connection.
 */
async function applyTogether(db: Db, planned: readonly Planned[], timeoutMs: number): Promise<BatchResult[]> {
  const deadline = Date.now() + timeoutMs;
  return db.begin(async (tx) => {
    // The same bound on the server, per statement: if this worker is killed while a statement waits on
    // a lock, PostgreSQL cancels it, ends the orphaned backend and releases the batch's row locks.
    await tx`select set_config('statement_timeout', ${String(Math.max(1, timeoutMs))}, true)`;
    const results: BatchResult[] = [];
    for (const p of planned) {
      const [row] = await cancelAfter(p.run(tx), deadline - Date.now());
      results.push({ claim: p.claim, outcome: !row?.applied ? "skipped" : p.ignored ? "ignored" : "processed", batched: true });
    }
    return results;
  });
}

/** Marks a row of a type without a handler `ignored` (settled: never retried), if still unprocessed. */
function ignoreStatement(tx: Tx, claim: Claim) {
  return tx<{ applied: boolean }[]>`
    with done as (
      update webhook_inbox
         set processed_at = now(),
             outcome = 'ignored',
             last_error = null
       where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
         and processed_at is null
         and needs_review_at is null
      returning 1
    )
    select exists (select 1 from done) as applied
  `;
}
