// Child for test/writeback/writeback.test.ts: `bun crash-after-call.ts <database-url> <fake-stripe-port> <event-id> <customer-id>`.
// Runs writeBackOnce whose call updates the customer's metadata through stripe-node (pointed at the
// fake Stripe server) and then, before writeBackOnce can record the result, prints
// `CALLED <object id> <idempotency key>` and waits forever, so the parent can SIGKILL it between the
// provider call and the record. Exits by itself (status 3) after 30 s if nobody kills it.
import { writeSync } from "node:fs";
import { connect } from "../../src/db/db.ts";
import { writeBackOnce } from "../../src/writeback/write-back-once.ts";
import { stripeClient, updateCustomerMetadata } from "./stripe-calls.ts";

setTimeout(() => {
  writeSync(1, "SELF_EXIT\n");
  process.exit(3);
}, 30_000);

const [url, port, eventId, customerId] = process.argv.slice(2);
if (!url || !port || !eventId || !customerId)
  throw new Error("Usage: bun crash-after-call.ts <database-url> <fake-stripe-port> <event-id> <customer-id>");

const db = connect(url, { max: 1, applicationName: "writeback-crash-child" });
const stripe = stripeClient(Number(port));
await writeBackOnce(db, { provider: "stripe", eventId, operation: "update-customer-metadata" }, async (key) => {
  const result = await updateCustomerMetadata(stripe, customerId, eventId, key);
  writeSync(1, `CALLED ${result.id} ${key}\n`);
  return new Promise<never>(() => {}); // the process is killed here: the result is never recorded
});
writeSync(1, "RECORDED\n"); // never reached
