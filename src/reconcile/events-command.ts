// `bun run reconcile events`: the command line of event backfill (parsing, runs per endpoint, output).
import type { Telemetry } from "../telemetry.ts";
import type Stripe from "stripe";
import { ConfigError, loadEndpointsWithoutSecrets, parseDuration, type EndpointSettings } from "../config.ts";
import { sqlState, SQLSTATE, type Db } from "../db/db.ts";
import { sleep } from "../db/sleep.ts";
import { finishCoveredRequests } from "../handlers/backfill-requests.ts";
import { stripeEndpoints } from "../receiver/endpoints.ts";
import { backfillEndpoint } from "./catch-up.ts";
import { readStripeApiSettings, stripeApiClient, type StripeApiSettings } from "../stripe-api/client.ts";
import { describeStripeFailure } from "../stripe-api/describe-failure.ts";
import type { StripeRetryOptions } from "../stripe-api/retry.ts";
import { backfillEvents, MAX_PAGE_SIZE, type BackfillSummary } from "./backfill-events.ts";
import { stripeEventLister } from "./stripe-events.ts";
import { accountLabel, accountsOf, readAccountChoice } from "./connected-accounts.ts";
import { readSince, UsageError } from "./reconcile-args.ts";

export const EVENTS_USAGE = `Usage: bun run reconcile events [options]
  --since 3d|ISO     window start (default: where the endpoint's checkpoint left off; without one, 3 days ago)
  --endpoint NAME    one endpoint (default: every configured endpoint, billing first)
  --account acct_…   read that connected account's events only (Stripe-Account), at the Connect endpoints
                     (STRIPE_CONNECT_<NAME>=true), or at the endpoint --endpoint names; its own checkpoint
  --all-accounts     the platform's events, then every connected account's (GET /v1/accounts), each with its
                     own checkpoint; connected accounts at Connect endpoints (or the one --endpoint names)
  --types a,b        only these event types (at most 20; the checkpoint does not move)
  --undelivered      only events Stripe failed to deliver (delivery_success=false; the checkpoint does not move)
  --dry-run          write nothing: count new vs already recorded
  --json             a machine summary on stdout
  --page-size N      events per Stripe list call, 1–100 (default 100)
  --every 15m        run again at this interval until stopped (SIGTERM/Ctrl-C)
Without --account or --all-accounts, the platform's own events only.
STRIPE_API_KEY (a restricted key with Events read is enough; --all-accounts also lists accounts: Connect read) and STRIPE_API_BASE (default https://api.stripe.com).
Endpoints and their modes come from serve's settings (STRIPE_ENDPOINTS, STRIPE_ENDPOINT_KIND_*, INBOX_MODE*); no
STRIPE_WEBHOOK_SECRET is needed: backfill verifies no signature.
Exit codes: 0 everything recorded, 1 a failure, an interval older than Stripe's 30 days, another run holding the lease or a stop
before the end (the checkpoint is after the last page recorded), 2 usage.`;

/** What the command needs from its entry file: the database, output streams and a stop signal. */
export interface EventsCommandDeps {
  /** Opens the database the way one-shot commands do (DATABASE_URL or the embedded server). */
  openDb(): Promise<{ db: Db; close(): Promise<void> }>;
  out(line: string): void;
  err(line: string): void;
  /** Progress lines (pages, events, new vs already recorded); undefined when stderr is not a terminal. */
  progress?: (line: string) => void;
  signal?: AbortSignal;
  now?: () => number;
  /** Waits `ms` or until `signal` aborts (for `--every`). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Backoff of each list call (withStripeRetry's defaults otherwise; tests shorten the waits). */
  retry?: Omit<StripeRetryOptions, "onRetry">;
  /** OpenTelemetry: each backfill run is a span (backfill-events.ts). Default: none. */
  telemetry?: Telemetry;
}

/** `--every 15m` as ms ({@link parseDuration}). @throws UsageError. */
function parseEvery(raw: string): number {
  try {
    return parseDuration(raw);
  } catch {
    throw new UsageError(`--every must be a positive duration (15m, 1h), got "${raw}"`);
  }
}

const STRING_FLAGS = new Set(["since", "endpoint", "types", "page-size", "every", "account"]);
const BOOLEAN_FLAGS = new Set(["undelivered", "dry-run", "json", "help", "all-accounts"]);

/**
 * `--name value`, `--name=value` and boolean `--name` (`-h` for help); anything else, a flag given
 * twice or a positional argument is a usage error (never ignored). Web APIs only, like the rest of src/reconcile/.
 */
function readFlags(args: string[]): Record<string, string | boolean | undefined> {
  const values: Record<string, string | boolean | undefined> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(arg === "-h" ? "--help" : arg);
    if (!m) throw new UsageError(`Unexpected argument "${arg}"`);
    const name = m[1]!;
    if (values[name] !== undefined) throw new UsageError(`--${name} is given twice`);
    if (BOOLEAN_FLAGS.has(name) && m[2] === undefined) values[name] = true;
    else if (STRING_FLAGS.has(name)) {
      const value = m[2] ?? args[++i];
      if (value === undefined) throw new UsageError(`--${name} needs a value`);
      values[name] = value;
    } else throw new UsageError(`Unknown option --${name}`);
  }
  return values;
}

/** Reads the flags. @throws UsageError. */
function parse(args: string[], nowMs: number) {
  const flags = readFlags(args);
  const str = (name: string) => flags[name] as string | undefined;
  const values = {
    since: str("since"),
    endpoint: str("endpoint"),
    types: str("types"),
    "page-size": str("page-size"),
    every: str("every"),
    undelivered: flags.undelivered === true,
    "dry-run": flags["dry-run"] === true,
    json: flags.json === true,
    help: flags.help === true,
  };
  const accounts = readAccountChoice(str("account"), flags["all-accounts"] === true);
  const types = values.types
    ?.split(",")
    .map((t) => t.trim())
    .filter(Boolean);
  if (types && (types.length === 0 || types.length > 20))
    throw new UsageError("--types takes 1 to 20 comma-separated event types (Stripe's limit)");
  const pageSize = values["page-size"] === undefined ? MAX_PAGE_SIZE : Number(values["page-size"]);
  if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > MAX_PAGE_SIZE)
    throw new UsageError(`--page-size must be a whole number from 1 to ${MAX_PAGE_SIZE}, got "${values["page-size"]}"`);
  return {
    help: values.help,
    since: values.since === undefined ? undefined : readSince(values.since, new Date(nowMs)),
    endpoint: values.endpoint,
    types,
    undelivered: values.undelivered,
    dryRun: values["dry-run"],
    json: values.json,
    pageSize,
    everyMs: values.every === undefined ? undefined : parseEvery(values.every),
    accounts,
  };
}

/** One summary as text lines for the terminal. */
export function summaryLines(s: BackfillSummary): string[] {
  const at = s.account === "" ? s.endpoint : `${s.endpoint} (${s.account})`;
  if (s.status === "busy")
    return [`${at}: another process is backfilling this endpoint for this account (it holds the lease); nothing done`];
  const verb = s.dryRun ? "would record" : "recorded";
  const lines = [
    `${at}: ${s.events} event(s) in ${s.pages} page(s) from ${s.from ?? "-"} to ${s.to}: ${verb} ${s.fresh} new, ${s.alreadyRecorded} already recorded` +
      (s.dryRun
        ? ""
        : ` (processed ${s.outcomes.processed}, queued ${s.outcomes.queued}, ignored ${s.outcomes.ignored}, needs review ${s.outcomes.needs_review}` +
          `${s.outcomes.ignored_mode > 0 ? `, other mode ${s.outcomes.ignored_mode}` : ""})`) +
      (s.status === "interrupted" ? "; stopped early" : ""),
  ];
  if (!s.dryRun) lines.push(`  checkpoint: covered until ${s.coveredUntil ?? "(not set: filtered run)"}`);
  if (s.unrecoverable)
    lines.push(
      `  Events created from ${s.unrecoverable.from} to ${s.unrecoverable.to} can no longer be backfilled (Stripe keeps events for 30 days): ` +
        `reconcile objects for that interval with \`bun run reconcile invoices --since ${s.unrecoverable.from}\``,
    );
  return lines;
}

/**
 * Runs `reconcile events` with `args` (after the subcommand) against `env`. Returns the exit code:
 * 0 when every endpoint's window was recorded, 1 on a failure (Stripe after retries, the database),
 * an interval past Stripe's 30 days (reported, the rest recorded), a lease held by another run or a
 * stop (`signal`) before the end,
 * 2 on a usage or configuration error. Never prints the API key or payloads.
 */
export async function reconcileEventsCommand(
  args: string[],
  env: Record<string, string | undefined>,
  deps: EventsCommandDeps,
): Promise<number> {
  const now = deps.now ?? Date.now;
  let options;
  let settings: EndpointSettings[];
  let api: StripeApiSettings;
  let stripe: Stripe;
  try {
    options = parse(args, now());
    if (options.help) return (deps.out(EVENTS_USAGE), 0);
    // Backfill verifies no signature: the endpoints come from the same variables as `serve`'s, secrets aside.
    settings = loadEndpointsWithoutSecrets(env);
    api = readStripeApiSettings(env);
    stripe = stripeApiClient(api);
  } catch (err) {
    if (err instanceof UsageError) return (deps.err(`${err.message}\n\n${EVENTS_USAGE}`), 2);
    if (err instanceof ConfigError) return (deps.err(err.message), 2);
    throw err;
  }
  const endpoints = stripeEndpoints(settings).filter((e) => !options.endpoint || e.name === options.endpoint);
  if (endpoints.length === 0) return (deps.err(`No endpoint named "${options.endpoint}" is configured (STRIPE_ENDPOINTS)`), 2);
  // A connected account's events go to a Connect endpoint (Stripe docs, "Connect webhooks"): without
  // --endpoint they are read for those only; an endpoint named with --endpoint gets them whatever its
  // flag, and then parks them as it would their webhook deliveries (refusalOf).
  const readsAccounts = (e: (typeof endpoints)[number]) => e.connect === true || options.endpoint !== undefined;
  if (options.accounts.kind === "one" && !endpoints.some(readsAccounts))
    return (
      deps.err(
        `No endpoint is declared Connect (${endpoints.map((e) => e.name).join(", ")}): --account reads a connected account's events, ` +
          "which a Connect endpoint receives (set STRIPE_CONNECT_<NAME>=true, or name one with --endpoint)",
      ),
      2
    );
  const retry: StripeRetryOptions = {
    ...deps.retry,
    onRetry: (attempt, waitMs, reason, err) =>
      deps.err(`${describeStripeFailure(err, api.apiBase) ?? reason}; retrying in ${waitMs} ms (try ${attempt + 1})`),
  };
  const list = stripeEventLister(stripe, { types: options.types, undelivered: options.undelivered }, retry);
  const accountsAt = async () => {
    const all = await accountsOf(options.accounts, stripe, retry);
    return (e: (typeof endpoints)[number]) => (readsAccounts(e) ? all : all.filter((a) => a === ""));
  };
  const { db, close } = await deps.openDb();
  try {
    for (;;) {
      let code = 0;
      const summaries: BackfillSummary[] = [];
      // Listed again each round of --every: an account connected meanwhile is read from its next round.
      let accountsOfEndpoint: Awaited<ReturnType<typeof accountsAt>>;
      try {
        accountsOfEndpoint = await accountsAt();
      } catch (err) {
        const message = describeStripeFailure(err, api.apiBase) ?? (err instanceof Error ? err.message : String(err));
        deps.err(`Cannot list the connected accounts (GET /v1/accounts): ${message.slice(0, 300)}`);
        accountsOfEndpoint = () => [];
        code = 1;
      }
      for (const e of endpoints)
        for (const account of accountsOfEndpoint(e)) {
          const label = account === "" ? e.name : `${e.name} (${accountLabel(account)})`;
          try {
            const s = await backfillEvents({
              db,
              list,
              ...backfillEndpoint(e),
              account,
              since: options.since,
              filtered: options.types !== undefined || options.undelivered,
              dryRun: options.dryRun,
              pageSize: options.pageSize,
              owner: `reconcile events ${crypto.randomUUID()}`,
              telemetry: deps.telemetry,
              now,
              signal: deps.signal,
              onPage: (p) =>
                deps.progress?.(
                  `${label}: page ${p.page}: ${p.events} event(s), ${p.fresh} new, ${p.alreadyRecorded} already recorded (up to ${new Date(p.newestCreatedSec * 1000).toISOString()})`,
                ),
            });
            summaries.push(s);
            // A run of every event type finishes the backfill requests (a failover's, a health notice's) it covered.
            if (!options.dryRun && options.types === undefined && !options.undelivered) await finishCoveredRequests(db, s);
            if (s.unrecoverable || s.status !== "done") code = 1;
          } catch (err) {
            code = 1;
            const message =
              sqlState(err) === SQLSTATE.undefinedTable
                ? "the database schema is older than this code: run `bun run migrate` first"
                : (describeStripeFailure(err, api.apiBase) ?? (err instanceof Error ? err.message : String(err)));
            deps.err(`${label}: backfill failed: ${message.slice(0, 300)} (the checkpoint is after the last page recorded; run again)`);
          }
        }
      if (options.json) deps.out(JSON.stringify({ exitCode: code, endpoints: summaries }));
      else for (const s of summaries) for (const line of summaryLines(s)) deps.out(line);
      if (options.everyMs === undefined || deps.signal?.aborted) return code;
      await (deps.sleep ?? sleep)(options.everyMs, deps.signal);
      if (deps.signal?.aborted) return code;
    }
  } finally {
    await close();
  }
}
