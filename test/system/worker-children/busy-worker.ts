// Child for test/system/worker-crash.test.ts: runs runWorker with ONE slot (concurrency 1) on the database at
// argv[2]. Its invoice.paid handler prints `IN_HANDLER <event id>`, holds its row until a second row
// is in the inbox (plus 0.3 s), then books the payment, so the parent's NOTIFY for the second row
// arrives while the only slot is busy. A child process, because a worker loop that never yields would
// starve the test runner's own event loop. Worker log lines go to stdout as JSON; SIGTERM stops it
// (exit 0). Exits by itself (status 3) after 30 s if nobody stops it.
import { writeSync } from "node:fs";
import { connect } from "../../../src/db/db.ts";
import type { HandlerTable } from "../../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../../src/handlers/billing.ts";
import { runWorker } from "../../../src/worker/worker.ts";

setTimeout(() => {
  report("SELF_EXIT");
  process.exit(3);
}, 30_000);

const url = process.argv[2];
if (!url) throw new Error("Cannot start the busy worker: usage is `bun busy-worker.ts <database-url>`");

/** One line on stdout with a direct write(2). */
function report(line: string): void {
  writeSync(1, `${line}\n`);
}

const book = billingHandlers["invoice.paid"];
if (!book) throw new Error("Cannot start the busy worker: billing has no invoice.paid handler");
const slow: HandlerTable = {
  "invoice.paid": async (tx, object, context) => {
    report(`IN_HANDLER ${context.eventId}`);
    // Keep the only slot busy until the parent has queued a second row (its NOTIFY then arrives
    // while this row is in flight), and a little longer; at most ~5 s.
    for (let i = 0; i < 250; i++) {
      const [row] = await tx<{ n: number }[]>`select count(*)::int as n from webhook_inbox`;
      if ((row?.n ?? 0) >= 2) break;
      await tx`select pg_sleep(0.02)`;
    }
    await tx`select pg_sleep(0.3)`;
    await book(tx, object, context);
  },
};

const db = connect(url, { max: 2, applicationName: "worker-busy-child" });
const controller = new AbortController();
process.on("SIGTERM", () => controller.abort());
report("WORKER_STARTED");
await runWorker({
  db,
  tables: { stripe: slow },
  signal: controller.signal,
  concurrency: 1,
  pollMs: 30_000,
  log: (line) => report(JSON.stringify(line)),
});
await db.end({ timeout: 5 });
report("WORKER_STOPPED");
process.exit(0);
