// Edge file: the worker-drain backlog of `bun run bench`, recorded as async receive records it.
import type { Db } from "../../db/db.ts";
import { inboxRow, type InboxRow } from "../../inbox/inbox.ts";
import type { VerifiedEvent } from "../../providers/provider.ts";
import { stripeApiEvent } from "../../providers/stripe.ts";
import { benchEventBody } from "./payload.ts";

/** A tree's `insertInbox` (src/inbox/inbox.ts): this tree's, or an older commit's in `--only layout`. */
export type InsertInbox = (sql: Db, rows: readonly InboxRow[]) => Promise<unknown>;

/** Rows per insert statement (17 parameters each: well under PostgreSQL's 65,535). */
const ROWS_PER_STATEMENT = 500;

/**
 * Records `n` unprocessed Stripe `invoice.paid` events at endpoint `bench-drain` for a worker, each its own
 * event, invoice and line ids (`evt_bench_<run>_<i>`, the ~1.5 KB payload.ts body), through `insert`, the
 * insertInbox of the code that will drain them, so each layout gets its own rows exactly as its async
 * receiver writes them (before sql/0027 one wide row with the payload; since, a state row and its
 * payload row), {@link ROWS_PER_STATEMENT} per statement. `run` must be an identifier-safe string.
 */
export async function prefillBacklog(db: Db, insert: InsertInbox, run: string, n: number): Promise<void> {
  for (let lo = 0; lo < n; lo += ROWS_PER_STATEMENT) {
    const rows = Array.from({ length: Math.min(ROWS_PER_STATEMENT, n - lo) }, (_, i) => {
      const body = benchEventBody(run, lo + i);
      const event: VerifiedEvent = { ...stripeApiEvent(JSON.parse(body)), source: "webhook", body };
      return inboxRow({ provider: "stripe", endpoint: "bench-drain", eventId: event.id }, event, null);
    });
    await insert(db, rows);
  }
}
