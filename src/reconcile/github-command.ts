// `bun run reconcile github`: GitHub never redelivers a failed delivery by itself (GitHub docs, "Handling
// failed webhook deliveries"). This lists a hook's recent deliveries, finds the failed ones whose
// X-GitHub-Delivery the inbox does not hold, and asks GitHub to redeliver each once. Web APIs only.
import { commaList } from "../config.ts";
import type { Db } from "../db/db.ts";
import {
  GitHubApiError,
  listDeliveries,
  readGitHubHook,
  redeliver,
  type GitHubHookSettings,
  type HookDelivery,
} from "./github-hook-api.ts";
import { readSince, UsageError } from "./reconcile-args.ts";

export const GITHUB_USAGE = `Usage: bun run reconcile github [options]
  --endpoint NAME    the GitHub endpoint (WEBHOOK_ENDPOINTS entry github/NAME); default: the only one configured
  --since 3d|ISO     deliveries made since then (default 3d: GitHub redelivers only deliveries of the past 3 days)
  --dry-run          list what would be redelivered, ask GitHub for nothing
  --json             a machine summary on stdout
Per endpoint: GITHUB_HOOK_<NAME> = repos/<owner>/<repo>/hooks/<hook_id> | orgs/<org>/hooks/<hook_id> | app/hook,
GITHUB_TOKEN_<NAME> (a token with the "Webhooks" read and write permission; the app's JWT for app/hook);
GITHUB_API_BASE (default https://api.github.com).
Exit codes: 0 nothing to redeliver, 1 something was (or would be, with --dry-run) redelivered or a failure, 2 usage.`;

/** What the command needs from its entry file. */
export interface GitHubCommandDeps {
  /** Opens the database the way one-shot commands do. */
  openDb(): Promise<{ db: Db; close(): Promise<void> }>;
  out(line: string): void;
  err(line: string): void;
  /** Unix ms (default Date.now). */
  now?: () => number;
  /** The HTTP client (default the global fetch). */
  fetch?: typeof fetch;
}

/** The outcome of one run, as `--json` prints it. */
export interface GitHubReconcileSummary {
  endpoint: string;
  since: string;
  dryRun: boolean;
  /** Deliveries listed within the window, and the pages read. */
  deliveries: number;
  pages: number;
  /** Distinct guids with a failed delivery in the window. */
  failed: number;
  /** Of those, already in the inbox (an earlier redelivery got through). */
  alreadyRecorded: number;
  /** Asked for (or, with --dry-run, that would be). */
  redelivered: { guid: string; id: number; event: string; status_code: number; delivered_at: string }[];
  /** Redeliveries GitHub refused, with its answer. */
  refused: { guid: string; id: number; error: string }[];
}

/** Reads the flags. @throws UsageError. */
function parse(args: readonly string[], nowMs: number) {
  const options = {
    endpoint: undefined as string | undefined,
    since: new Date(nowMs - 3 * 86_400_000),
    dryRun: false,
    json: false,
    help: false,
  };
  const seen = new Set<string>();
  for (let i = 0; i < args.length; i++) {
    const m = /^(--[a-z-]+|-h)(?:=(.*))?$/.exec(args[i]!);
    if (!m) throw new UsageError(`Unexpected argument "${args[i]}"`);
    const [, flag, inline] = m as unknown as [string, string, string | undefined];
    if (seen.has(flag)) throw new UsageError(`${flag} is given twice`);
    seen.add(flag);
    const value = () => {
      const v = inline ?? args[++i];
      if (v === undefined) throw new UsageError(`${flag} needs a value`);
      return v;
    };
    if (flag === "--endpoint") options.endpoint = value();
    else if (flag === "--since") options.since = readSince(value(), new Date(nowMs));
    else if (inline !== undefined) throw new UsageError(`${flag} takes no value`);
    else if (flag === "--dry-run") options.dryRun = true;
    else if (flag === "--json") options.json = true;
    else if (flag === "--help" || flag === "-h") options.help = true;
    else throw new UsageError(`Unknown option ${flag}`);
  }
  return options;
}

/** The GitHub endpoint to reconcile: `--endpoint`, else the only `github/<name>` of `WEBHOOK_ENDPOINTS`. @throws UsageError. */
function chooseEndpoint(env: Record<string, string | undefined>, wanted: string | undefined): string {
  const names = commaList(env.WEBHOOK_ENDPOINTS)
    .filter((s) => s.startsWith("github/"))
    .map((s) => s.slice("github/".length));
  if (wanted !== undefined && names.includes(wanted)) return wanted;
  if (wanted !== undefined)
    throw new UsageError(
      `No GitHub endpoint named "${wanted}" is configured (WEBHOOK_ENDPOINTS: ${names.map((n) => `github/${n}`).join(", ") || "none"})`,
    );
  if (names.length === 1) return names[0]!;
  if (names.length === 0) throw new UsageError("No GitHub endpoint is configured: WEBHOOK_ENDPOINTS has no github/<name> entry");
  throw new UsageError(`Several GitHub endpoints are configured (${names.join(", ")}): name one with --endpoint`);
}

const succeeded = (d: HookDelivery) => typeof d.status_code === "number" && d.status_code >= 200 && d.status_code < 300;

/** Which of `guids` the inbox holds at GitHub endpoint `endpoint` (whatever their state). */
async function recordedGuids(db: Db, endpoint: string, guids: string[]): Promise<Set<string>> {
  if (guids.length === 0) return new Set();
  const rows = await db<{ event_id: string }[]>`
    select event_id
      from webhook_inbox
     where provider = 'github'
       and endpoint = ${endpoint}
       and event_id = any(${guids}::text[])
  `;
  return new Set(rows.map((r) => r.event_id));
}

/** One line for an API failure, naming the token's variable when GitHub refused it (never its value). */
function describe(err: unknown, s: GitHubHookSettings): string {
  if (err instanceof GitHubApiError && err.status === 401) return `GitHub refused ${s.tokenVar}: ${err.message} (a wrong or expired token)`;
  if (err instanceof GitHubApiError && (err.status === 403 || err.status === 404))
    return `${err.message}: check ${s.hookVar} and that ${s.tokenVar} may read and redeliver this hook's deliveries ("Webhooks" read and write)`;
  const message = err instanceof Error ? err.message : String(err);
  return message.split(s.token).join("<token>").slice(0, 300);
}

/**
 * Runs `reconcile github` with `args` (after the subcommand) against `env`: lists the endpoint's hook's
 * deliveries made since `--since` (newest first, every page until one is older), takes each guid with a
 * failed delivery (a `status_code` outside 2xx) that the inbox does not hold at `(github, endpoint)`,
 * and asks GitHub to redeliver its newest failed attempt, oldest guid first, once per run: one line each,
 * then a summary (or `--json`). Returns the exit code: 0 nothing to redeliver; 1 something was (or would
 * be, with `--dry-run`) redelivered, or a failure (GitHub's API, the database); 2 usage or configuration.
 * Never prints the token.
 */
export async function reconcileGitHubCommand(
  args: string[],
  env: Record<string, string | undefined>,
  deps: GitHubCommandDeps,
): Promise<number> {
  const now = deps.now ?? Date.now;
  let options;
  let endpoint: string;
  let settings: GitHubHookSettings | string[];
  try {
    options = parse(args, now());
    if (options.help) return (deps.out(GITHUB_USAGE), 0);
    endpoint = chooseEndpoint(env, options.endpoint);
    settings = readGitHubHook(env, endpoint);
  } catch (err) {
    if (err instanceof UsageError) return (deps.err(`${err.message}\n\n${GITHUB_USAGE}`), 2);
    throw err;
  }
  if (Array.isArray(settings)) return (deps.err(`Invalid configuration:\n- ${settings.join("\n- ")}`), 2);
  const s = settings;
  const label = `github/${endpoint}`;
  const summary: GitHubReconcileSummary = {
    endpoint,
    since: options.since.toISOString(),
    dryRun: options.dryRun,
    deliveries: 0,
    pages: 0,
    failed: 0,
    alreadyRecorded: 0,
    redelivered: [],
    refused: [],
  };
  const sinceMs = options.since.getTime();
  // Newest first: the first failed attempt seen of a guid is its newest, the one to redeliver.
  const failed = new Map<string, HookDelivery>();
  let code = 0;
  const { db, close } = await deps.openDb();
  try {
    try {
      for await (const page of listDeliveries(s, 100, deps.fetch)) {
        summary.pages++;
        const inWindow = page.filter((d) => Date.parse(d.delivered_at) >= sinceMs);
        summary.deliveries += inWindow.length;
        for (const d of inWindow) if (!succeeded(d) && !failed.has(d.guid)) failed.set(d.guid, d);
        if (inWindow.length < page.length) break;
      }
    } catch (err) {
      deps.err(`${label}: cannot list the hook's deliveries: ${describe(err, s)}`);
      return 1;
    }
    summary.failed = failed.size;
    const recorded = await recordedGuids(db, endpoint, [...failed.keys()]);
    summary.alreadyRecorded = recorded.size;
    const todo = [...failed.values()].filter((d) => !recorded.has(d.guid)).reverse();
    for (const d of todo) {
      const what = `${d.guid} (delivery ${d.id}: ${d.event}${d.action ? `.${d.action}` : ""}, answered ${d.status_code ?? 0} "${String(d.status).slice(0, 80)}" at ${d.delivered_at})`;
      try {
        if (!options.dryRun) await redeliver(s, d.id, deps.fetch);
        summary.redelivered.push({ guid: d.guid, id: d.id, event: d.event, status_code: d.status_code, delivered_at: d.delivered_at });
        if (!options.json) deps.out(`${options.dryRun ? "would redeliver" : "redelivered"} ${what}`);
      } catch (err) {
        const error = describe(err, s);
        summary.refused.push({ guid: d.guid, id: d.id, error });
        deps.err(`cannot redeliver ${what}: ${error}`);
        // A refused token refuses every other one too: one line, not one per delivery.
        if (err instanceof GitHubApiError && err.status === 401) break;
      }
    }
  } catch (err) {
    deps.err(`${label}: ${err instanceof Error ? err.message.slice(0, 300) : String(err)}`);
    return 1;
  } finally {
    await close();
  }
  if (summary.redelivered.length > 0 || summary.refused.length > 0) code = 1;
  if (options.json) deps.out(JSON.stringify({ exitCode: code, ...summary }));
  else
    deps.out(
      `${label}: ${summary.deliveries} deliveries in ${summary.pages} page(s) since ${summary.since}: ${summary.failed} failed, ` +
        `${summary.alreadyRecorded} already recorded, ${options.dryRun ? "would redeliver" : "redelivered"} ${summary.redelivered.length}` +
        (summary.refused.length > 0 ? `, ${summary.refused.length} refused by GitHub` : ""),
    );
  return code;
}
