// Entry file: `bun run billing`: prints invoices (with their dunning state), the ledger, net amounts per
// invoice, Checkout Sessions and subscriptions (when there are any), the outbox and the inbox by state.
// Exit codes: 0 ok, 1 failure, 2 usage error.
import { parseArgs } from "node:util";
import { cannotConnectMessage, isConnectFailure } from "../db/connect-failure.ts";
import { sqlState, SQLSTATE, type Db } from "../db/db.ts";
import { printableRow } from "../ops/printable.ts";
import { openCommandDatabase } from "../runtime/refuse-hidden-pooler.ts";

const USAGE = `Usage: bun run billing [--limit N | --all]
  prints the newest invoices, ledger entries and outbox rows (20 of each by default, in id order),
  net amounts per invoice, and the inbox's rows counted per endpoint and state
  ledger kinds: payment (in), refund (out), refund_reversal (in: a failed refund's money came back),
  dispute_withdrawal, dispute_fee (out), dispute_fee_reversal, dispute_reinstatement (in);
  amounts are minor units, always positive: the kind gives the direction; amount/currency is what the
  customer paid (the invoice's currency), a fee's is the currency Stripe charged it in;
  settlement_amount/settlement_currency is what the balance transaction moved, where an event said
  --limit N   show the N newest rows of each table (N ≥ 1)
  --all       show every row`;

function usage(problem: string): never {
  console.error(`${problem}\n\n${USAGE}`);
  process.exit(2);
}

const { values: opts, positionals } = (() => {
  try {
    return parseArgs({
      allowPositionals: true,
      options: {
        limit: { type: "string" },
        all: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (err) {
    usage(err instanceof Error ? err.message : String(err));
  }
})();
if (opts.help) {
  console.log(USAGE);
  process.exit(0);
}
if (positionals.length) usage(`billing takes no arguments, got ${positionals.map((p) => `"${p}"`).join(" ")}`);
if (opts.all && opts.limit !== undefined) usage("Choose one of --limit and --all");
const limit = opts.all ? null : Number(opts.limit ?? 20);
if (limit !== null && (!/^\d+$/.test(opts.limit ?? "20") || !Number.isSafeInteger(limit) || limit < 1)) {
  usage(`--limit must be a whole number ≥ 1, got "${opts.limit}"`);
}

/** Prints `rows` as a table (text from events escaped), then how many older rows it left out. */
function table(title: string, rows: Record<string, unknown>[], total: number): void {
  console.log(title);
  if (rows.length === 0) console.log("(none)");
  else console.table(rows.map(printableRow));
  if (total > rows.length) console.log(`… ${total - rows.length} more (older) not shown: --limit N or --all`);
}

/** The `limit` newest rows of each table (all with --all), shown in id order, with each table's total. */
async function printTables(db: Db): Promise<void> {
  const [counts] = await db<{ invoices: number; ledger: number; net: number; outbox: number; connect: boolean }[]>`
    select (select count(*) from invoices)::int as invoices,
           (select count(*) from ledger_entries)::int as ledger,
           (select count(*) from invoice_net)::int as net,
           (select count(*) from outbox)::int as outbox,
           exists (select 1 from invoices where account <> '') or exists (select 1 from ledger_entries where account <> '') as connect
  `;
  // With connected accounts' rows, each table leads with the account: the same invoice id under two
  // accounts is two invoices (docs/stripe-connect.md), not one booked twice.
  const account = counts?.connect ? db`account,` : db``;
  table(
    "invoices",
    await db`
    select ${account} id, status, currency, amount_due, amount_paid, attempt_count, dunning
      from (select * from invoices order by created_at desc, id desc limit ${limit}) newest
     order by ${account} id
  `,
    counts?.invoices ?? 0,
  );
  // invoice_id of a refund or dispute row is derived from the stored links (ledger_entries_linked).
  table(
    "ledger_entries (amounts in minor units; invoice_id null: not linked yet)",
    await db`
    select ${account} invoice_id, kind, amount, currency, settlement_amount, settlement_currency, balance_transaction, source_id, event_id
      from (select * from ledger_entries_linked order by id desc limit ${limit}) newest
     order by ${account} id
  `,
    counts?.ledger ?? 0,
  );
  table(
    "net per invoice and currency (minor units; net = paid − refunded + refunds_reversed − dispute_withdrawn − dispute_fees + dispute_fees_returned + dispute_reinstated)",
    await db`
    select ${account} invoice_id, currency, paid, refunded, refunds_reversed, dispute_withdrawn, dispute_fees, dispute_fees_returned, dispute_reinstated, net
      from (select * from invoice_net order by invoice_id desc nulls first, currency limit ${limit}) newest
     order by ${account} invoice_id nulls last, currency
  `,
    counts?.net ?? 0,
  );
  await printCheckoutAndSubscriptions(db);
  table(
    "outbox",
    await db`
    select aggregate_id, event_type, published
      from (select id, aggregate_id, event_type, published_at is not null as published from outbox order by id desc limit ${limit}) newest
     order by id
  `,
    counts?.outbox ?? 0,
  );
  console.log("webhook_inbox");
  console.table(
    (
      await db`
    select endpoint,
           case when processed_at is not null then outcome
                when needs_review_at is not null then 'needs_review'
                else 'unprocessed' end as state,
           count(*)::int as rows
      from webhook_inbox
     group by 1, 2
     order by 1, 2
  `
    ).map(printableRow),
  );
}

/** Checkout Sessions and subscriptions (sql/0022), the `limit` newest of each, printed only when there are any. */
async function printCheckoutAndSubscriptions(db: Db): Promise<void> {
  const [counts] = await db<{ sessions: number; subscriptions: number }[]>`
    select (select count(*) from checkout_sessions)::int as sessions, (select count(*) from subscriptions)::int as subscriptions
  `;
  if (counts?.sessions)
    table(
      "checkout_sessions (fulfilled: one checkout_fulfilments row and one CheckoutSessionFulfilled message each)",
      await db`
      select account, id, state, payment_status, amount_total, currency
        from (select * from checkout_sessions order by created_at desc, id desc limit ${limit}) newest
       order by id
    `,
      counts.sessions,
    );
  if (counts?.subscriptions)
    table(
      "subscriptions",
      await db`
      select account, id, status, has_access, current_period_end, cancel_at_period_end
        from (select * from subscriptions order by created_at desc, id desc limit ${limit}) newest
       order by id
    `,
      counts.subscriptions,
    );
}

const { db } = await openCommandDatabase(process.env, "webhook-inbox billing", 1);
try {
  await printTables(db);
} catch (err) {
  const reason = err instanceof Error ? err.message : String(err);
  if (isConnectFailure(err)) console.error(cannotConnectMessage(err));
  else if (sqlState(err) === SQLSTATE.undefinedTable)
    console.error(`Cannot read billing tables: ${reason} (run \`bun run migrate\` first?)`);
  else console.error(`Cannot read billing tables: ${reason}`);
  process.exitCode = 1;
} finally {
  await db.end({ timeout: 5 });
}
