import type Stripe from "stripe";
import { ConfigError } from "../config.ts";
import { sqlState, SQLSTATE, type Db } from "../db/db.ts";
import { describeError } from "../errors.ts";
import { handlerTables } from "../receiver/endpoints.ts";
import { readStripeApiSettings, stripeApiClient } from "../stripe-api/client.ts";
import { withStripeRetry, type StripeRetryOptions } from "../stripe-api/retry.ts";
import { findInvoiceDrift, isRepairable, type InvoiceDrift, type StripeInvoiceRow } from "./invoice-drift.ts";
import { parseReconcileArgs, UsageError, type ReconcileArgs } from "./reconcile-args.ts";
import { repairInvoice, repairKey, type RepairResult, type RepairTarget } from "./repair-invoice.ts";

export const INVOICES_USAGE = `Usage: bun run reconcile invoices [--since 30d|ISO] [--repair] [--dry-run] [--json]
  lists Stripe's invoices created since --since (default 30d) and compares status, amounts, currency
  and the booked payment with the local invoices and ledger; prints each drifted invoice by class
  --repair    applies Stripe's current invoice through the webhook handlers, recorded in the inbox as
              reconcile:<invoice>:<status>:<amount_paid> (source reconcile); drift the handlers cannot
              repair is recorded as needs-review for an operator
  --dry-run   with --repair: says what it would record, writes nothing
  --json      machine output
  exit codes: 0 nothing drifted, 1 drift found (repaired or not) or a failure, 2 usage or configuration
  needs STRIPE_API_KEY (a restricted key with Invoices read), STRIPE_API_BASE optional`;

/** How the command reaches the world; the entry file passes the real ones, tests their own. */
export interface ReconcileIo {
  /** Opens the database the way one-shot commands do (DATABASE_URL or the embedded server). */
  openDatabase(env: Record<string, string | undefined>): Promise<{ db: Db; close(): Promise<void> }>;
  /** Standard output, one call per line (default console.log). */
  out?(line: string): void;
  /** Standard error (default console.error). */
  err?(line: string): void;
  /** Backoff of each page fetch (withStripeRetry's defaults otherwise). */
  retry?: StripeRetryOptions;
  /** Invoices per list page, 1–100 (default 100, Stripe's maximum). */
  pageSize?: number;
  now?(): Date;
}

/** One drifted invoice as reported: the drift and, with --repair, what the repair did (or would do, with --dry-run). */
export interface ReportedDrift extends InvoiceDrift {
  repairable: boolean;
  repair?: RepairResult | { key: string; outcome: "would_repair" | "would_park" };
}

/** The whole run, as `--json` prints it. */
export interface InvoiceReconciliation {
  since: string;
  checked: number;
  drifted: number;
  byClass: Record<string, number>;
  repair: boolean;
  dryRun: boolean;
  drift: ReportedDrift[];
}

/** Where repairs go: the Stripe handler table, recorded under the default endpoint `billing`. */
const TARGET: RepairTarget = { provider: "stripe", endpoint: "billing", handlers: handlerTables.stripe };

/**
 * `bun run reconcile invoices`: lists Stripe's invoices created since `--since` (newest first, each
 * page fetched with {@link withStripeRetry}, paged with `starting_after`), compares each page with the
 * local rows in one query ({@link findInvoiceDrift}) and, with `--repair`, repairs each drifted invoice
 * through the handlers ({@link repairInvoice}). Prints a summary by class and every drifted invoice
 * (JSON with `--json`). Returns the exit code: 0 nothing drifted, 1 drift found or a failure (Stripe
 * or the database), 2 a usage or configuration error (STRIPE_API_KEY missing or malformed: never quoted).
 */
export async function reconcileInvoicesCommand(args: string[], env: Record<string, string | undefined>, io: ReconcileIo): Promise<number> {
  const out = io.out ?? ((line: string) => console.log(line));
  const err = io.err ?? ((line: string) => console.error(line));
  let opts: ReconcileArgs;
  let stripe: Stripe;
  try {
    opts = parseReconcileArgs(args, io.now?.() ?? new Date());
    if (opts.help) return (out(INVOICES_USAGE), 0);
    stripe = stripeApiClient(readStripeApiSettings(env));
  } catch (e) {
    if (e instanceof UsageError) return (err(`${e.message}\n\n${INVOICES_USAGE}`), 2);
    if (e instanceof ConfigError) return (err(e.message), 2);
    throw e;
  }
  const { db, close } = await io.openDatabase(env);
  try {
    const report = await reconcile(db, stripe, opts, io, err);
    out(opts.json ? JSON.stringify(report, null, 2) : render(report).join("\n"));
    return report.drifted > 0 ? 1 : 0;
  } catch (e) {
    if (sqlState(e) === SQLSTATE.undefinedTable)
      err(`Cannot read the billing tables: ${describeError(e)} (run \`bun run migrate\` first?)`);
    else err(`Cannot reconcile invoices: ${describeError(e)}`);
    return 1;
  } finally {
    await close();
  }
}

async function reconcile(db: Db, stripe: Stripe, opts: ReconcileArgs, io: ReconcileIo, err: (l: string) => void) {
  const report: InvoiceReconciliation = {
    since: opts.since.toISOString(),
    checked: 0,
    drifted: 0,
    byClass: {},
    repair: opts.repair,
    dryRun: opts.dryRun,
    drift: [],
  };
  const retry: StripeRetryOptions = {
    ...io.retry,
    onRetry: (attempt, waitMs, reason) => err(`Stripe answered ${reason} (try ${attempt}): retrying in ${waitMs} ms`),
  };
  for await (const page of invoicePages(stripe, opts.since, io.pageSize ?? 100, retry)) {
    report.checked += page.length;
    const byId = new Map(page.map((o) => [o.id, o]));
    for (const d of await findInvoiceDrift(db, page.map(rowOf))) {
      const reported: ReportedDrift = { ...d, repairable: isRepairable(d) };
      if (opts.repair && opts.dryRun)
        reported.repair = { key: repairKey(rowOf(byId.get(d.invoiceId)!)), outcome: reported.repairable ? "would_repair" : "would_park" };
      else if (opts.repair) reported.repair = await repairInvoice(db, TARGET, d, byId.get(d.invoiceId)!);
      report.drift.push(reported);
      report.byClass[d.drift] = (report.byClass[d.drift] ?? 0) + 1;
    }
  }
  report.drifted = report.drift.length;
  return report;
}

/** A Stripe invoice as an API object with the fields the comparison reads. */
type InvoiceObject = Record<string, unknown> & { id: string };

/** Stripe's invoices created at or after `since`, one page (newest first) at a time, each fetch retried. */
async function* invoicePages(stripe: Stripe, since: Date, limit: number, retry: StripeRetryOptions): AsyncGenerator<InvoiceObject[]> {
  const gte = Math.floor(since.getTime() / 1000);
  let startingAfter: string | undefined;
  for (;;) {
    const page = await withStripeRetry(
      () => stripe.invoices.list({ limit, created: { gte }, ...(startingAfter ? { starting_after: startingAfter } : {}) }),
      retry,
    );
    const data = page.data as unknown as InvoiceObject[];
    yield data;
    const last = data.at(-1);
    if (!page.has_more || !last) return;
    startingAfter = last.id;
  }
}

function rowOf(o: InvoiceObject): StripeInvoiceRow {
  return {
    id: o.id,
    status: String(o.status),
    currency: String(o.currency),
    amount_due: Number(o.amount_due ?? 0),
    amount_paid: Number(o.amount_paid ?? 0),
  };
}

/** The text report: a summary line, counts by class, one line per drifted invoice. */
function render(r: InvoiceReconciliation): string[] {
  const lines = [
    `Checked ${r.checked} Stripe invoice(s) created since ${r.since}: ${r.drifted === 0 ? "no drift" : `${r.drifted} drifted`}`,
  ];
  for (const [c, n] of Object.entries(r.byClass)) lines.push(`  ${c.padEnd(24)} ${n}`);
  for (const d of r.drift) {
    const s = d.stripe;
    const l = d.local;
    const local = l.status === null ? "local: none" : `local: ${l.status} ${l.amountDue} due, booked ${l.booked ?? "none"} ${l.currency}`;
    const repair = d.repair ? ` → ${d.repair.outcome} ${d.repair.key}` : d.repairable ? "" : " (needs an operator)";
    lines.push(`${d.invoiceId}  ${d.drift}  stripe: ${s.status} ${s.amountDue} due, ${s.amountPaid} paid ${s.currency}  ${local}${repair}`);
  }
  if (r.drifted > 0 && !r.repair)
    lines.push("Run with --repair to apply Stripe's invoices through the handlers (--dry-run first to see what it records)");
  return lines.map(escape);
}

/** Control and bidirectional characters as escapes, so text from the API cannot drive a terminal. */
function escape(text: string): string {
  return text.replace(
    /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
