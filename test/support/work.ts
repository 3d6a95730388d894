import type { Db } from "../../src/db/db.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { claimBatch, type Claim } from "../../src/worker/claim.ts";
import { processClaim, type WorkOutcome } from "../../src/worker/process-claim.ts";

/** What {@link workOff} did with one claimed row. */
export interface Worked {
  claim: Claim;
  outcome: WorkOutcome;
  error?: string;
}

/**
 * Claims every due row (up to `limit`) and processes each in turn with `processClaim`, as a worker's
 * slots would, with `tables` by provider (default: `handlers` for Stripe rows).
 */
export async function workOff(
  db: Db,
  handlers: HandlerTable,
  options: { tables?: Record<string, HandlerTable>; limit?: number; maxAttempts?: number; timeoutMs?: number } = {},
): Promise<Worked[]> {
  const maxAttempts = options.maxAttempts ?? 10;
  const claims = await claimBatch(db, { limit: options.limit ?? 100, leaseMs: 60_000, maxAttempts });
  const results: Worked[] = [];
  for (const claim of claims) {
    const result = await processClaim(db, claim, {
      tables: options.tables ?? { stripe: handlers },
      timeoutMs: options.timeoutMs ?? 5_000,
      maxAttempts,
      backoff: { baseMs: 60_000, capMs: 600_000 },
    });
    results.push({ claim, ...result });
  }
  return results;
}
