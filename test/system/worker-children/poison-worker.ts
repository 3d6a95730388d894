// Child for test/system/worker-crash.test.ts: runs runWorker (argv[3] slots, default 1; batches of argv[4]
// rows, default the worker's; max 3 attempts, 1 s lease) on the database at argv[2] with the billing invoice.paid handler, except that the
// event of an invoice whose id contains "poison" SIGKILLs this process from inside its handler (a real
// crash mid-batch, as an out-of-memory kill would). Prints `IN_HANDLER <invoice id> <attempt>` before
// each handler runs, and every worker log line as JSON. Exits by itself (status 3) after 30 s.
// Imports only src/ (test/support/helpers.ts would pull in test/setup.ts and start a database server).
import { writeSync } from "node:fs";
import { connect } from "../../../src/db/db.ts";
import { billingHandlers } from "../../../src/handlers/billing.ts";
import type { HandlerTable } from "../../../src/handlers/handler-table.ts";
import { runWorker } from "../../../src/worker/worker.ts";

setTimeout(() => {
  report("SELF_EXIT");
  process.exit(3);
}, 30_000);

const url = process.argv[2];
if (!url) throw new Error("Cannot start the poison worker: usage is `bun poison-worker.ts <database-url>`");

/** One line on stdout with a direct write(2), so the parent sees it even when the next step kills us. */
function report(line: string): void {
  writeSync(1, `${line}\n`);
}

const book = billingHandlers["invoice.paid"]!;
const poisoned: HandlerTable = {
  "invoice.paid": async (tx, object, context) => {
    const [row] = await tx<{ attempts: number }[]>`
      select attempts from webhook_inbox
       where (provider, endpoint, event_id) = (${context.provider}, ${context.endpoint}, ${context.eventId})
    `;
    report(`IN_HANDLER ${String(object.id)} ${String(row?.attempts)}`);
    if (String(object.id).includes("poison")) process.kill(process.pid, "SIGKILL");
    await book(tx, object, context);
  },
};

const db = connect(url, { max: 2, applicationName: "worker-poison-child" });
report("WORKER_STARTED");
await runWorker({
  db,
  tables: { stripe: poisoned },
  signal: new AbortController().signal,
  concurrency: Number(process.argv[3] ?? 1),
  ...(process.argv[4] ? { batch: Number(process.argv[4]) } : {}),
  leaseMs: 1_000,
  timeoutMs: 500,
  maxAttempts: 3,
  pollMs: 100,
  listen: false,
  log: (line) => report(JSON.stringify(line)),
});
