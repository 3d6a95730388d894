import { isPermanent, settleWithin, STUCK_SLACK_MS, type Db } from "../db/db.ts";
import { describeError } from "../errors.ts";
import { applyEach, type ApplyInput, type EachOutcome } from "../inbox/apply-event.ts";
import { storedEvent } from "../inbox/stored-event.ts";
import { EndpointPaused } from "../inbox/pauses.ts";
import { subjectOf } from "../providers/registry.ts";
import { traceparentOf } from "../telemetry.ts";
import type { Claim } from "./claim.ts";
import { claimSpanSpec, processClaim, recordFailures, type AttemptRecord, type ProcessOptions, type WorkOutcome } from "./process-claim.ts";

/** What one claimed row came to, for the worker's log line: as {@link processClaim} reports it. */
export interface ClaimResult {
  outcome: WorkOutcome;
  error?: string;
  note?: string;
  traceId?: string;
  spanId?: string;
}

/** Largest batch: each event is a subtransaction, and PostgreSQL caches 64 subtransaction ids per backend (PGPROC_MAX_CACHED_SUBXIDS); more would overflow it. */
export const MAX_BATCH = 64;

/**
 * Groups the rows of one claim into at most `free` units, one per slot:
 * - rows `alone` says are processed alone (default: rows already tried, attempt > 1; the worker adds
 *   rows that need an API read; claimBatch takes few of them) go one to a unit, where
 *   {@link processClaims} processes them alone after the unit's batch;
 * - rows never tried are sorted by their business object (account, then the stored event's object id,
 *   stable: one object's events stay in claim order) and cut into contiguous runs of at most `batch`,
 *   a cut moved past an object's events where the run has room, so one object's events are mostly in
 *   one unit, applied one after the other, and units lock objects in the same order.
 * Returns no empty unit.
 */
export function chunkClaims(
  claims: readonly Claim[],
  free: number,
  batch: number,
  alone: (claim: Claim) => boolean = (c) => c.attempt > 1,
): Claim[][] {
  const retried = claims.filter(alone);
  const fresh = claims
    .filter((c) => !alone(c))
    .map((claim) => ({ claim, key: objectKey(claim) }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const n = fresh.length;
  const k = Math.min(free, Math.max(retried.length, Math.ceil(n / batch)));
  if (k === 0) return [];
  // Even cuts, each moved past the events of the object it would split while its unit stays within `batch`.
  const cuts = [0];
  for (let i = 1; i < k; i++) {
    const before = cuts[i - 1]!;
    let cut = Math.max(before, Math.floor((i * n) / k));
    while (cut > 0 && cut < n && fresh[cut]!.key === fresh[cut - 1]!.key && cut - before < batch) cut++;
    cuts.push(cut);
  }
  cuts.push(n);
  const units = cuts.slice(0, -1).map((cut, i) => fresh.slice(cut, cuts[i + 1]).map((f) => f.claim));
  for (const [i, claim] of retried.entries()) units[i % k]!.push(claim);
  return units.filter((u) => u.length > 0);
}

/** `account \0 object id` of a claimed row's stored event; only the account when it cannot be read. */
function objectKey(claim: Claim): string {
  try {
    const id = subjectOf(claim.provider, storedEvent(claim.payload, claim.rawBody).payload).object.id;
    return `${claim.account}\u0000${typeof id === "string" ? id : ""}`;
  } catch {
    return claim.account;
  }
}

/**
 * Processes one slot's claimed rows ({@link chunkClaims}), returning each row's result in the order given:
 * 1. Rows on their first attempt whose object is the stored event's (no Stripe API read) and whose
 *    provider has a table, in ONE transaction with a savepoint each ({@link applyEach}: each row's
 *    `claimed` hold and handler exactly as applyEvent runs them; one row's failure rolls back that row
 *    only). Failures are recorded in the same transaction ({@link recordFailures}: backoff, needs-review
 *    at the limit or at once when permanent), and rows the batch's `timeoutMs` did not reach, or whose
 *    endpoint was paused since the claim (`held`), are released (attempt given back, due at once).
 *    Their attempts were counted by the claim, committed before this work (seed §6).
 * 2. Then the other rows (claimBatch takes few: at most one already tried per worker, one that needs an
 *    API read per free slot), each alone in its own transaction, at once, with
 *    {@link processClaim}: a row already tried (never in a batch, so an event whose handler kills the
 *    worker takes only itself towards the attempt limit), a thin or refetch row (its API read outside
 *    any transaction, ending within its lease), a row that cannot be read or has no table. One with
 *    less than `timeoutMs` of its lease left is released instead of started.
 * With telemetry, each row of the batch gets its own `process <endpoint>` span (claimSpanSpec) for the
 * batch's duration, its traceparent set for its own statements.
 * Never throws: a batch whose transaction failed as a whole (the database went away, the COMMIT
 * failed) reports each of its rows `failed` with that error and records nothing (their leases run
 * out and they are claimed again, each then alone as a retried row).
 */
export async function processClaims(db: Db, claims: readonly Claim[], options: ProcessOptions): Promise<ClaimResult[]> {
  const results = new Map<Claim, ClaimResult>();
  const batch: { claim: Claim; input: ApplyInput }[] = [];
  const alone: Claim[] = [];
  for (const claim of claims) {
    const input = claim.attempt <= 1 ? batchInput(claim, options) : undefined;
    if (input) batch.push({ claim, input });
    else alone.push(claim);
  }
  if (batch.length > 0) for (const [claim, result] of await applyBatch(db, batch, options)) results.set(claim, result);
  const done = await Promise.all(alone.map((claim) => processAlone(db, claim, options)));
  for (const [i, claim] of alone.entries()) results.set(claim, done[i]!);
  return claims.map((c) => results.get(c)!);
}

/** The applyEach input of a row the batch can take, or undefined when it must be processed alone. */
function batchInput(claim: Claim, options: ProcessOptions): ApplyInput | undefined {
  if (claim.refusal || !Object.hasOwn(options.tables, claim.provider)) return undefined;
  const handlers = options.tables[claim.provider]!;
  if (Object.hasOwn(handlers, claim.eventType) && options.fetcher?.needsFetch(claim)) return undefined;
  try {
    const { object } = subjectOf(claim.provider, storedEvent(claim.payload, claim.rawBody).payload);
    return {
      key: claim,
      handlers,
      type: claim.eventType,
      object,
      account: claim.account,
      hold: { claimed: true },
      timeoutMs: options.timeoutMs,
    };
  } catch {
    return undefined; // processClaim reports why, and parks it
  }
}

async function applyBatch(db: Db, batch: { claim: Claim; input: ApplyInput }[], options: ProcessOptions): Promise<Map<Claim, ClaimResult>> {
  const t = options.telemetry;
  const spans = t
    ? batch.map(({ claim }) => {
        const spec = claimSpanSpec(t, claim);
        return t.tracer.startSpan(spec.name, spec, t.api.ROOT_CONTEXT);
      })
    : [];
  const inputs = batch.map(({ input }, i) => ({ ...input, traceparent: traceparentOf(t, spans[i]) }));
  let parked: boolean[] = [];
  const records = (outcomes: readonly EachOutcome[]): AttemptRecord[] =>
    outcomes.flatMap((o, i): AttemptRecord[] => {
      const claim = batch[i]!.claim;
      if ("error" in o && o.error instanceof EndpointPaused) return [{ claim, release: true }];
      if ("error" in o) return [{ claim, error: describeError(o.error), permanent: isPermanent(o.error) }];
      return "notStarted" in o ? [{ claim, release: true }] : [];
    });
  const results = new Map<Claim, ClaimResult>();
  try {
    const outcomes = await applyEach(db, inputs, options.timeoutMs, async (tx, outcomes) => {
      parked = await recordFailures(tx, records(outcomes), options);
    });
    let r = 0; // index into the records, which follow the outcomes that have one
    for (const [i, o] of outcomes.entries()) {
      const claim = batch[i]!.claim;
      if ("applied" in o) {
        results.set(claim, { outcome: o.applied === "duplicate" ? "skipped" : (o.applied as "processed" | "ignored") });
      } else if ("notStarted" in o) {
        r++;
        results.set(claim, { outcome: "released" });
      } else if (o.error instanceof EndpointPaused) {
        r++;
        results.set(claim, { outcome: "held", error: o.error.message });
      } else {
        results.set(claim, { outcome: parked[r++] ? "needs_review" : "failed", error: describeError(o.error) });
      }
    }
  } catch (err) {
    for (const { claim } of batch) results.set(claim, { outcome: "failed", error: describeError(err) });
  }
  for (const [i, span] of spans.entries()) {
    const result = results.get(batch[i]!.claim)!;
    span.setAttribute("webhook_inbox.outcome", result.outcome);
    if (result.error !== undefined) span.setStatus({ code: t!.api.SpanStatusCode.ERROR, message: result.error.slice(0, 300) });
    const ids = span.spanContext();
    if (t!.api.isSpanContextValid(ids)) Object.assign(result, { traceId: ids.traceId, spanId: ids.spanId });
    span.end();
  }
  return results;
}

async function processAlone(db: Db, claim: Claim, options: ProcessOptions): Promise<ClaimResult> {
  try {
    if (claim.leaseEndsAt - Date.now() < options.timeoutMs) {
      await recordFailures(db, [{ claim, release: true }], options);
      return { outcome: "released" };
    }
    // Bounded here too: a row whose connection stopped answering frees its slot; its lease runs out and it is claimed again.
    return await settleWithin(processClaim(db, claim, options), 2 * options.timeoutMs + STUCK_SLACK_MS, "The row's transaction");
  } catch (err) {
    return { outcome: "failed", error: describeError(err) };
  }
}
