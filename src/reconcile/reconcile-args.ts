import { parseDuration } from "../config.ts";

/** A command-line problem: the caller prints it with the usage and exits 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** The options of `reconcile invoices` (and of the other object reconciliations). */
export interface ReconcileArgs {
  /** Start of the `created` window. */
  since: Date;
  repair: boolean;
  dryRun: boolean;
  json: boolean;
  help: boolean;
  /** `--account acct_…`: that connected account only. */
  account?: string;
  /** `--all-accounts`: the platform and every connected account. */
  allAccounts: boolean;
}

const ISO = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/**
 * Reads `--since 30d|ISO` (default 30d: how long Stripe keeps events, the window backfill cannot
 * reach beyond), `--repair`, `--dry-run`, `--json`, `--help`, `--account acct_…`, `--all-accounts`
 * (`--since=…`, `--account=…` also accepted; the account is checked by connected-accounts.ts). `now` is
 * the clock for a duration.
 * @throws UsageError naming an unknown option, a stray argument, or a `--since` that is neither a
 *   duration ({@link readSince}) nor an ISO 8601 date or date-time.
 */
export function parseReconcileArgs(args: readonly string[], now: Date, command = "reconcile"): ReconcileArgs {
  const out: ReconcileArgs = {
    since: new Date(now.getTime() - 30 * 86_400_000),
    repair: false,
    dryRun: false,
    json: false,
    help: false,
    allAccounts: false,
  };
  for (let i = 0; i < args.length; i++) {
    const [flag, inline] = splitFlag(args[i]!);
    if (flag === "--repair") out.repair = true;
    else if (flag === "--dry-run") out.dryRun = true;
    else if (flag === "--json") out.json = true;
    else if (flag === "--help" || flag === "-h") out.help = true;
    else if (flag === "--all-accounts") out.allAccounts = true;
    else if (flag === "--account") {
      const value = inline ?? args[++i];
      if (value === undefined) throw new UsageError("--account needs a value (acct_…)");
      out.account = value;
    } else if (flag === "--since") {
      const value = inline ?? args[++i];
      if (value === undefined) throw new UsageError("--since needs a value (30d or an ISO time)");
      out.since = readSince(value, now);
    } else if (flag.startsWith("-")) throw new UsageError(`Unknown option ${JSON.stringify(flag)}`);
    else throw new UsageError(`${command} takes no arguments, got ${JSON.stringify(flag)}`);
    if (inline !== undefined && flag !== "--since" && flag !== "--account") throw new UsageError(`${flag} takes no value`);
  }
  return out;
}

function splitFlag(arg: string): [string, string | undefined] {
  const at = arg.indexOf("=");
  return arg.startsWith("--") && at > 0 ? [arg.slice(0, at), arg.slice(at + 1)] : [arg, undefined];
}

/**
 * A duration before `now` ({@link parseDuration}: `30d`, `12h`, …), or an ISO 8601 date or date-time
 * that is a real calendar day.
 * @throws UsageError for anything else.
 */
export function readSince(value: string, now: Date): Date {
  if (ISO.test(value)) {
    const [y, m, d] = value.slice(0, 10).split("-").map(Number) as [number, number, number];
    const day = new Date(Date.UTC(y, m - 1, d));
    const at = new Date(value);
    if (day.getUTCMonth() === m - 1 && day.getUTCDate() === d && !Number.isNaN(at.getTime())) return at;
  } else
    try {
      return new Date(now.getTime() - parseDuration(value));
    } catch {
      // Neither: said below.
    }
  throw new UsageError(`--since must be a duration (30d, 12h) or an ISO time (2026-11-01T00:00:00Z), got ${JSON.stringify(value)}`);
}
