import postgres from "postgres";
import { billingHandlers } from "../../handlers/billing.ts";
import { inboxRow, insertInbox } from "../../inbox/inbox.ts";
import type { VerifiedEvent } from "../../providers/provider.ts";
import { stripeApiEvent, stripeSubject } from "../../providers/stripe.ts";
import { receiveAsync, receiveSync } from "../../receiver/receive.ts";
import { benchEventBody } from "./payload.ts";

const EVENT = "evt_bench_SENTINEL_0";
const INVOICE = "in_bench_SENTINEL_0";
/** pgbench expressions that make every transaction's ids unique. */
const EVENT_EXPR = "('evt_pgb_' || :client_id || '_' || :n)";
const INVOICE_EXPR = "('in_pgb_' || :client_id || '_' || :n)";
const HEADER = "\\set n random(1, 2000000000)\n";

/** A SQL string literal. */
function literal(value: unknown): string {
  return value === null ? "null" : `'${String(value).replace(/'/g, "''")}'`;
}

/** What {@link capturedScript} captures: a sync delivery, an async one, or our inbox insert alone. */
export type CapturedWork = "sync" | "async" | "insert";

/**
 * Captures the exact statements our code sends (through postgres.js's `debug` hook, on a throwaway
 * event whose rows are deleted afterwards) and turns them into a pgbench script: `$n` parameters become
 * literals, except the event and invoice ids, which become per-transaction unique expressions, and
 * comments become a space. `sync` and `async` (endpoint `bench-capture`): what the receiver sends for one
 * delivery on that path, its whole transaction from BEGIN to COMMIT. `insert` (endpoint `bench-inbox`):
 * the inbox insert alone, src/inbox/inbox.ts `insertInbox` for one unprocessed row in autocommit (its
 * state row and its payload row in one statement), the ceiling of async receive. One multi-line command
 * per statement (pgbench 10 and later read a command up to its `;`). The coalesced NOTIFY after a commit
 * is left out (at most one per 20 ms, not one per delivery). The event is the bench's Stripe
 * invoice.paid body as the Stripe provider reads it (its creation time and livemode go into the row, as
 * through `serve`).
 * @throws Error when the captured SQL holds a `:word` pgbench would take for a variable.
 */
export async function capturedScript(url: string, work: CapturedWork): Promise<string> {
  const captured: { text: string; params: unknown[] }[] = [];
  const sql = postgres(url, {
    max: 1,
    onnotice: () => {},
    debug: (_c, text, params) => captured.push({ text, params: params as unknown[] }),
  });
  const body = benchEventBody("SENTINEL", 0);
  const event: VerifiedEvent = { ...stripeApiEvent(JSON.parse(body)), source: "webhook", body };
  const target = { provider: "stripe", endpoint: work === "insert" ? "bench-inbox" : "bench-capture", handlers: billingHandlers };
  let sent = 0;
  try {
    if (work === "insert")
      await insertInbox(sql, [inboxRow({ provider: target.provider, endpoint: target.endpoint, eventId: EVENT }, event, null)]);
    else await (work === "sync" ? receiveSync(sql, target, event) : receiveAsync(sql, target, event));
    sent = captured.length;
    await sql.begin(async (tx) => {
      await tx`delete from webhook_inbox_payloads where endpoint = ${target.endpoint} and event_id = ${EVENT}`;
      await tx`delete from webhook_inbox where endpoint = ${target.endpoint} and event_id = ${EVENT}`;
      await tx`delete from outbox where aggregate_id = ${INVOICE}`;
      await tx`delete from ledger_entries where invoice_id = ${INVOICE}`;
      await tx`delete from invoices where id = ${INVOICE}`;
    });
  } finally {
    await sql.end();
  }
  // Not postgres.js's one-time type lookup on a new connection, nor the coalesced NOTIFY after the commit.
  const statements = captured.slice(0, sent).filter((c) => !c.text.includes("pg_catalog.") && !c.text.includes("pg_notify"));
  return checkedForPgbench(HEADER + statements.map((c) => `${substitute(withoutComments(c.text), c.params)};\n`).join(""));
}

class Rollback extends Error {}

function substitute(text: string, params: unknown[]): string {
  let out = text;
  for (let i = params.length; i >= 1; i--) {
    const value = params[i - 1];
    const replacement = value === EVENT ? EVENT_EXPR : value === INVOICE ? INVOICE_EXPR : literal(value);
    out = out.replaceAll(`$${i}`, replacement);
  }
  return out.trim();
}

// A string literal, a quoted identifier, a dollar-quoted body, or a comment (a line or block comment).
const SQL_TOKENS = /'(?:[^']|'')*'|"(?:[^"]|"")*"|(\$(?:[A-Za-z_]\w*)?\$)[\s\S]*?\1|--[^\n]*|\/\*[\s\S]*?\*\//g;

/**
 * `text` with its SQL comments replaced by a space; literals and identifiers left as they are. pgbench
 * reads every `:word` in a command as a variable, comments included, and comments are no part of the
 * work measured.
 */
function withoutComments(text: string): string {
  return text.replace(SQL_TOKENS, (token) => (token.startsWith("--") || token.startsWith("/*") ? " " : token));
}

/**
 * `script` unchanged, once no `:word` other than our own variables (`:client_id`, `:n`) is in it:
 * pgbench substitutes `:word` everywhere, inside string literals too, and fails on an undefined one.
 * @throws Error naming the stray `:word`.
 */
function checkedForPgbench(script: string): string {
  const stray = [...script.matchAll(/(?<!:):([A-Za-z_\x80-\uffff][\w\x80-\uffff]*)/g)]
    .map((m) => m[1])
    .find((name) => name !== "client_id" && name !== "n");
  if (stray) throw new Error(`Cannot make a pgbench script: ":${stray}" in the captured SQL would be read as a pgbench variable`);
  return script;
}

/**
 * The seed's naive sync transaction (§5.3 `receive_sync` with §5.2 `_apply_invoice_paid`): BEGIN, inbox
 * insert, invoice upsert, status read, ledger insert, outbox insert, processed_at update, COMMIT: six
 * statements, each its own round trip, on the seed's one-table inbox (`naive_inbox`, naive-inbox.ts,
 * which must exist: the bench creates it), as the naive peer runs them. The anchor our single-statement
 * path must beat.
 */
export function seedSyncScript(): string {
  const body = literal(benchEventBody("pgbench", 0));
  return `${HEADER}begin;
insert into naive_inbox (provider, endpoint, event_id, event_type, payload) values ('stripe', 'bench-seed', ${EVENT_EXPR}, 'invoice.paid', ${body}::jsonb) on conflict (provider, endpoint, event_id) do nothing returning event_id;
insert into invoices (id, customer_id, status, currency, amount_due, amount_paid, paid_at) values (${INVOICE_EXPR}, 'cus_pgb', 'paid', 'usd', 2000, 2000, now()) on conflict (account, id) do update set status = 'paid', amount_paid = excluded.amount_paid, paid_at = coalesce(invoices.paid_at, excluded.paid_at), updated_at = now() where invoices.status not in ('paid', 'void');
select status from invoices where id = ${INVOICE_EXPR};
insert into ledger_entries (invoice_id, kind, amount, currency, event_id) values (${INVOICE_EXPR}, 'payment', 2000, 'usd', ${EVENT_EXPR}) on conflict (account, invoice_id, kind) do nothing returning id;
insert into naive_outbox (aggregate_type, aggregate_id, event_type, payload) values ('Invoice', ${INVOICE_EXPR}, 'InvoicePaymentBooked', jsonb_build_object('invoice_id', ${INVOICE_EXPR}, 'amount', 2000));
update naive_inbox set processed_at = now() where provider = 'stripe' and endpoint = 'bench-seed' and event_id = ${EVENT_EXPR};
commit;
`;
}

/**
 * The billing `invoice.paid` handler's exact statement, captured from postgres.js, with its
 * parameters for job `n`: the equal work the graphile-worker peer does per job.
 */
export async function capturedHandlerStatement(url: string): Promise<{ text: string; params: (n: number) => unknown[] }> {
  const captured: { text: string; params: unknown[] }[] = [];
  const sql = postgres(url, {
    max: 1,
    onnotice: () => {},
    debug: (_c, text, params) => captured.push({ text, params: params as unknown[] }),
  });
  const body = benchEventBody("SENTINEL", 0);
  const payload = JSON.parse(body) as Record<string, unknown>;
  try {
    await sql.begin(async (tx) => {
      await billingHandlers["invoice.paid"]?.(tx, stripeSubject(payload).object, {
        provider: "stripe",
        endpoint: "bench-peer",
        eventId: EVENT,
        eventType: "invoice.paid",
      });
      throw new Rollback();
    });
  } catch (err) {
    if (!(err instanceof Rollback)) throw err;
  } finally {
    await sql.end();
  }
  const statement = captured.find((c) => c.text.includes("ledger_entries"));
  if (!statement) throw new Error("Cannot capture the billing statement");
  return {
    text: statement.text,
    params: (n) => statement.params.map((p) => (p === EVENT ? `evt_peer_${n}` : p === INVOICE ? `in_peer_${n}` : p)),
  };
}
