// Entry file: `bun run billing`: prints invoices, the ledger, the outbox and the inbox by state.
import { connect } from "../db.ts";
import { openDatabase, poolerFromEnv } from "../runtime/database.ts";
import { refuseHiddenPooler } from "../runtime/refuse-hidden-pooler.ts";

const database = await openDatabase(process.env).catch((err: unknown) => {
  console.error(`Cannot open the database: ${err instanceof Error ? err.message : String(err)}`); // never quotes DATABASE_URL
  process.exit(1);
});
await refuseHiddenPooler(database, poolerFromEnv(process.env));
const db = connect(database.url, { max: 1, applicationName: "webhook-inbox billing", pooler: poolerFromEnv(process.env) });
try {
  console.log("invoices");
  console.table(await db`select id, status, currency, amount_due, amount_paid from invoices order by id`);
  console.log("ledger_entries (amounts in minor units)");
  console.table(await db`select invoice_id, kind, amount, currency, event_id from ledger_entries order by invoice_id`);
  console.log("outbox");
  console.table(await db`select aggregate_id, event_type, published_at is not null as published from outbox order by id`);
  console.log("webhook_inbox");
  console.table(await db`
    select endpoint,
           case when processed_at is not null then outcome
                when needs_review_at is not null then 'needs_review'
                else 'unprocessed' end as state,
           count(*)::int as rows
      from webhook_inbox
     group by 1, 2
     order by 1, 2
  `);
} catch (err) {
  console.error(`Cannot read billing tables: ${err instanceof Error ? err.message : String(err)} (run \`bun run migrate\` first?)`);
  process.exitCode = 1;
} finally {
  await db.end({ timeout: 5 });
  await database.close();
}
