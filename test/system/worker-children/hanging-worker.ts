// Child for test/system/worker-crash.test.ts: runs runWorker (max 3 attempts, 1 s lease) on the database at
// argv[2] with an invoice.paid handler that prints `IN_HANDLER <attempt>` while its row transaction is
// open and then hangs, so the parent can SIGKILL a worker in the middle of an attempt. Every worker log
// line goes to stdout as JSON. Exits by itself (status 3) after 30 s if nobody kills it.
// Imports only src/ (test/support/helpers.ts would pull in test/setup.ts and start a database server).
import { writeSync } from "node:fs";
import { connect } from "../../../src/db/db.ts";
import type { HandlerTable } from "../../../src/handlers/handler-table.ts";
import { runWorker } from "../../../src/worker/worker.ts";

const SELF_EXIT_MS = 30_000;
setTimeout(() => {
  report("SELF_EXIT");
  process.exit(3);
}, SELF_EXIT_MS);

const url = process.argv[2];
if (!url) throw new Error("Cannot start the hanging worker: usage is `bun hanging-worker.ts <database-url>`");

/** One line on stdout with a direct write(2), so the parent sees it before it kills us. */
function report(line: string): void {
  writeSync(1, `${line}\n`);
}

const hanging: HandlerTable = {
  "invoice.paid": async (tx, _object, context) => {
    const [row] = await tx<{ attempts: number }[]>`
      select attempts
        from webhook_inbox
       where (provider, endpoint, event_id) = (${context.provider}, ${context.endpoint}, ${context.eventId})
    `;
    report(`IN_HANDLER ${String(row?.attempts)}`);
    await new Promise<never>(() => {}); // holds the row transaction open until the parent kills us
  },
};

const db = connect(url, { max: 2, applicationName: "worker-crash-child" });
report("WORKER_STARTED");
await runWorker({
  db,
  tables: { stripe: hanging },
  signal: new AbortController().signal,
  concurrency: 1,
  leaseMs: 1_000,
  timeoutMs: 500,
  maxAttempts: 3,
  pollMs: 100,
  log: (line) => report(JSON.stringify(line)),
});
