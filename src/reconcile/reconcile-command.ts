import type Stripe from "stripe";
import type { Telemetry } from "../telemetry.ts";
import { ConfigError, loadEndpointsWithoutSecrets } from "../config.ts";
import { sqlState, SQLSTATE, type Db } from "../db/db.ts";
import { describeError } from "../errors.ts";
import { handlerTables } from "../receiver/endpoints.ts";
import { readStripeApiSettings, stripeApiClient } from "../stripe-api/client.ts";
import { describeStripeFailure } from "../stripe-api/describe-failure.ts";
import { withStripeRetry, type StripeRetryOptions } from "../stripe-api/retry.ts";
import type { ObjectDrift, ObjectKind, StripeObject } from "./object-kind.ts";
import { parseReconcileArgs, UsageError, type ReconcileArgs } from "./reconcile-args.ts";
import { accountLabel, accountsOf, readAccountChoice, type AccountChoice } from "./connected-accounts.ts";
import { plannedRepair, repairObject, resolveCleared, type RepairResult, type RepairTarget } from "./repair-object.ts";
import { recordReconcileRun } from "./record-run.ts";

/** The usage text of `reconcile <kind.name>`. */
export function reconcileUsage(kind: ObjectKind): string {
  return `Usage: bun run reconcile ${kind.name} [--since 30d|ISO] [--account acct_… | --all-accounts] [--repair] [--dry-run] [--json]
  lists Stripe's ${kind.name} created since --since (default 30d), compares them with the local rows and
  prints each drifted one by class
  --account acct_…  that connected account's ${kind.name} (read with Stripe-Account) against its rows only
  --all-accounts    the platform's, then every connected account's (GET /v1/accounts), each against its own rows
                    (without either: the platform's own ${kind.name} only)
  --repair          applies Stripe's current object through the webhook handlers under its account, recorded
                    in the inbox under reconcile:<id>:… (reconcile:<acct_…>:<id>:… for a connected account;
                    source reconcile); drift the handlers cannot repair is recorded as needs-review
  --dry-run         with --repair: says what it would record, writes nothing
  --json            machine output
  exit codes: 0 nothing drifted, 1 drift found (repaired or not) or a failure, 2 usage or configuration
  needs STRIPE_API_KEY (a restricted key with ${kind.permission} is enough; --all-accounts also lists accounts:
  Connect read) of the billing endpoint's mode (STRIPE_MODE, as serve reads it); STRIPE_API_BASE optional`;
}

/** How a reconciliation reaches the world; the entry file passes the real ones, tests their own. */
export interface ReconcileIo {
  /** Opens the database the way one-shot commands do (DATABASE_URL or the embedded server). */
  openDatabase(env: Record<string, string | undefined>): Promise<{ db: Db; close(): Promise<void> }>;
  /** Standard output (default console.log). */
  out?(text: string): void;
  /** Standard error, one call per line (default console.error). */
  err?(line: string): void;
  /** Backoff of each page fetch (withStripeRetry's defaults otherwise). */
  retry?: StripeRetryOptions;
  /** Objects per list page, 1–100 (default 100, Stripe's maximum). */
  pageSize?: number;
  now?(): Date;
  /** OpenTelemetry: each repair is a span (repair-object.ts). Default: none. */
  telemetry?: Telemetry;
}

/** One drifted object as reported and, with --repair, what the repair did (or would do, with --dry-run). */
export type ReportedDrift = ObjectDrift & {
  /** The account the object was read for: `acct_…`, or `""` for the platform. */
  account: string;
  repair?: RepairResult | ReturnType<typeof plannedRepair>;
};

/** The whole run, as `--json` prints it. */
export interface Reconciliation {
  kind: string;
  since: string;
  /** The accounts read, in order: `""` is the platform. */
  accounts: string[];
  checked: number;
  drifted: number;
  byClass: Record<string, number>;
  repair: boolean;
  dryRun: boolean;
  drift: ReportedDrift[];
  /** With --repair: needs-review rows reconciliation parked earlier about objects now in sync, resolved by this run (event ids). */
  cleared: string[];
}

/**
 * `bun run reconcile <kind>`: lists Stripe's objects of `kind` created since `--since` (newest first,
 * each page fetched with {@link withStripeRetry}, paged with `starting_after`), compares each page with
 * the local rows in one query (`kind.findDrift`) and, with `--repair`, repairs each drifted object
 * through the handlers ({@link repairObject}). With `--account acct_…` or `--all-accounts` it does so
 * for each account chosen (connected-accounts.ts): every list call made as that account, its objects
 * compared with its rows only, repairs applied under it. Prints a summary by class and every drifted object (JSON
 * with `--json`). Returns the exit code: 0 nothing drifted, 1 drift found or a failure (Stripe or the
 * database), 2 a usage or configuration error (STRIPE_API_KEY missing or malformed: never quoted; the
 * endpoint settings as `serve` reads them, so a key of another mode than `STRIPE_MODE` is refused).
 * Repairs are recorded at the default endpoint `billing` with the Stripe handler table, under its mode.
 */
export async function runReconcile(
  kind: ObjectKind,
  args: string[],
  env: Record<string, string | undefined>,
  io: ReconcileIo,
): Promise<number> {
  const out = io.out ?? ((text: string) => console.log(text));
  const err = io.err ?? ((line: string) => console.error(line));
  let opts: ReconcileArgs;
  let choice: AccountChoice;
  let stripe: Stripe;
  let apiBase: URL;
  let target: RepairTarget;
  try {
    opts = parseReconcileArgs(args, io.now?.() ?? new Date(), `reconcile ${kind.name}`);
    if (opts.help) return (out(reconcileUsage(kind)), 0);
    choice = readAccountChoice(opts.account, opts.allAccounts);
    const settings = readStripeApiSettings(env);
    apiBase = settings.apiBase;
    stripe = stripeApiClient(settings);
    // The endpoints as `serve` reads them: a key of another mode than the endpoint's is refused here.
    const { livemode } = loadEndpointsWithoutSecrets(env)[0]!;
    target = { provider: "stripe", endpoint: "billing", handlers: handlerTables.stripe, livemode };
  } catch (e) {
    if (e instanceof UsageError) return (err(`${e.message}\n\n${reconcileUsage(kind)}`), 2);
    if (e instanceof ConfigError) return (err(e.message), 2);
    throw e;
  }
  const { db, close } = await io.openDatabase(env);
  try {
    const report = await reconcile(db, stripe, kind, opts, choice, io, err, apiBase, target);
    out(opts.json ? JSON.stringify(report, null, 2) : render(report).join("\n"));
    return report.drifted > 0 ? 1 : 0;
  } catch (e) {
    const message =
      sqlState(e) === SQLSTATE.undefinedTable
        ? `Cannot read the local tables: ${describeError(e)} (run \`bun run migrate\` first?)`
        : `Cannot reconcile ${kind.name}: ${describeStripeFailure(e, apiBase) ?? describeError(e)}`;
    err(message);
    // A --json consumer (a cron log, an alert) gets a document on failure too, not an empty stdout.
    if (opts.json) out(JSON.stringify({ kind: kind.name, failed: true, error: message, exitCode: 1 }, null, 2));
    return 1;
  } finally {
    await close();
  }
}

async function reconcile(
  db: Db,
  stripe: Stripe,
  kind: ObjectKind,
  opts: ReconcileArgs,
  choice: AccountChoice,
  io: ReconcileIo,
  err: (l: string) => void,
  apiBase: URL,
  target: RepairTarget,
) {
  const report: Reconciliation = {
    kind: kind.name,
    since: opts.since.toISOString(),
    accounts: [],
    checked: 0,
    drifted: 0,
    byClass: {},
    repair: opts.repair,
    dryRun: opts.dryRun,
    drift: [],
    cleared: [],
  };
  const retry: StripeRetryOptions = {
    ...io.retry,
    onRetry: (attempt, waitMs, reason, e) =>
      err(`${describeStripeFailure(e, apiBase) ?? reason} (try ${attempt}): retrying in ${waitMs} ms`),
  };
  report.accounts = await accountsOf(choice, stripe, retry);
  // Each account on its own: its objects (read as it) against its rows, repaired under it.
  for (const account of report.accounts) {
    const run = { checked: 0, drift: [] as ReportedDrift[] };
    for await (const page of pages(stripe, kind, opts.since, io.pageSize ?? 100, retry, account)) {
      report.checked += page.length;
      run.checked += page.length;
      const byId = new Map(page.map((o) => [o.id, o]));
      const drifted = await kind.findDrift(db, page, account);
      if (opts.repair && !opts.dryRun) {
        const inSync = page.map((o) => o.id).filter((id) => !drifted.some((d) => d.id === id));
        report.cleared.push(...(await resolveCleared(db, target.provider, kind, inSync, account)));
      }
      for (const d of drifted) {
        const object = byId.get(d.id)!;
        const reported: ReportedDrift = { ...d, account };
        if (opts.repair && opts.dryRun) reported.repair = plannedRepair(target, kind, d, object, account);
        else if (opts.repair) reported.repair = await repairObject(db, target, kind, d, object, account, io.telemetry);
        report.drift.push(reported);
        run.drift.push(reported);
        report.byClass[d.drift] = (report.byClass[d.drift] ?? 0) + 1;
      }
    }
    // A dry run writes nothing, not even its run.
    if (!opts.dryRun) await recordReconcileRun(db, { kind: kind.name, account, since: opts.since, checked: run.checked, drift: run.drift });
  }
  report.drifted = report.drift.length;
  return report;
}

/** Stripe's objects of `account` created at or after `since`, one page (newest first) at a time, each fetch retried. */
async function* pages(stripe: Stripe, kind: ObjectKind, since: Date, limit: number, retry: StripeRetryOptions, account: string) {
  const gte = Math.floor(since.getTime() / 1000);
  let startingAfter: string | undefined;
  for (;;) {
    const after = startingAfter;
    const page = await withStripeRetry(
      () => kind.list(stripe, { limit, created: { gte }, ...(after ? { starting_after: after } : {}) }, account),
      retry,
    );
    yield page.data as StripeObject[];
    const last = page.data.at(-1);
    if (!page.has_more || !last) return;
    startingAfter = last.id;
  }
}

/** The text report: a summary line, counts by class, one line per drifted object. */
function render(r: Reconciliation): string[] {
  const lines = [
    `Checked ${r.checked} Stripe ${r.kind} created since ${r.since}` +
      (r.accounts.length === 1 && r.accounts[0] === "" ? "" : ` (${r.accounts.map(accountLabel).join(", ") || "no account"})`) +
      `: ${r.drifted === 0 ? "no drift" : `${r.drifted} drifted`}`,
  ];
  for (const [c, n] of Object.entries(r.byClass)) lines.push(`  ${c.padEnd(24)} ${n}`);
  for (const d of r.drift) {
    const repair = d.repair ? ` → ${d.repair.outcome} ${d.repair.key}` : d.repairable ? "" : " (needs an operator)";
    lines.push(
      `${d.account === "" ? "" : `${d.account}  `}${d.id}  ${d.drift}  stripe: ${fields(d.stripe)}  local: ${fields(d.local)}${repair}`,
    );
  }
  if (r.cleared.length > 0) lines.push(`Resolved ${r.cleared.length} needs-review row(s) reconcile parked earlier: now in sync`);
  if (r.drifted > 0 && !r.repair)
    lines.push("Run with --repair to apply Stripe's objects through the handlers (--dry-run first to see what it records)");
  return lines.map(escape);
}

function fields(side: Record<string, unknown>): string {
  return Object.entries(side)
    .map(([k, v]) => `${k} ${v ?? "none"}`)
    .join(", ");
}

/** Control and bidirectional characters as escapes, so text from the API cannot drive a terminal. */
function escape(text: string): string {
  return text.replace(
    /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
