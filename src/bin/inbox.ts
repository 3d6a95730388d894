// Entry file: `bun run inbox <command>`: the operator's view of the inbox (DATABASE_URL or embedded).
// Exit codes: 0 ok, 1 failure, 2 usage error. One file on purpose: it is the command line of src/ops/
// (each command parses its options, calls one operator function and prints), and its usage text, the
// option table and the checks they share read best side by side.
import { commaList, loadEndpointsWithoutSecrets } from "../config.ts";
import { parseArgs } from "node:util";
import { cannotConnectMessage, isConnectFailure } from "../db/connect-failure.ts";
import { sqlState, SQLSTATE, type Db } from "../db/db.ts";
import { handlersFor } from "../receiver/endpoints.ts";
import { migrate } from "../db/migrate.ts";
import { pageEvents, showEvent, type EventSummary } from "../ops/events.ts";
import { parseDuration, type RowFilter } from "../ops/filter.ts";
import { listOutbox, requeueOutbox } from "../ops/outbox.ts";
import { printable, printableJson, printableRow } from "../ops/printable.ts";
import { purge } from "../ops/purge.ts";
import { replayEvent } from "../ops/replay.ts";
import { requeue } from "../ops/requeue.ts";
import { resolveReviewed } from "../ops/resolve.ts";
import { inboxStatus } from "../ops/status.ts";
import { PAUSE_WAIT_MS, pauseEndpoint, resumeEndpoint, type PauseScope } from "../ops/pause.ts";
import type { Pause } from "../inbox/pauses.ts";
import {
  abandonRebuild,
  countRebuild,
  findRebuild,
  notRebuildable,
  runRebuild,
  startRebuild,
  type RebuildProgress,
} from "../ops/rebuild.ts";
import { onStopSignals } from "../runtime/signals.ts";
import { hostname } from "node:os";
import { readBacklog } from "../inbox/backlog.ts";
import { describeError } from "../errors.ts";
import { openCommandDatabase } from "../runtime/refuse-hidden-pooler.ts";
import { loadAppMigrations, loadMigrations } from "../runtime/migrations-fs.ts";

const USAGE = `Usage: bun run inbox <command> [options]      (--json on any command for machine output)
  An event is named by --id evt_… in every command (show and replay also take it as their one argument).
  --account acct_… narrows list, requeue and resolve to a connected account's events (platform: the platform's own).
  status                                  backlog per endpoint and of the outbox; arrivals per type over the last hour;
                                          the workers and dispatchers and whether each is alive; pauses
  list [--needs-review | --unprocessed] [--type T] [--endpoint E] [--account A] [--since 2h|ISO] [--attempts N] [--text T] [--limit N]
                                          --text: payloads containing T, among the 10 000 newest rows matching the rest
  show --id evt_… [--payload]             every row of an event as a table: account, state, attempts, last error (payload on request)
  requeue [--id evt_…] [--type T] [--endpoint E] [--account A] [--error TEXT] [--attempts N] [--dry-run]
                                          needs-review rows back to the queue, attempts reset
  resolve (--id evt_… | --type T | --error TEXT) [--endpoint E] [--account A] --note TEXT [--dry-run]
                                          close needs-review rows settled by hand (no handler runs)
  replay --id evt_… [--endpoint E]        run a processed event through its handler again (idempotent)
  pause --endpoint E [--account acct_… [--force]] [--note TEXT]
                                          hold the endpoint's (or one account's) events: recorded and answered 2xx,
                                          nothing applied; waits for events being applied to finish first
  resume --endpoint E [--account acct_…]  lift that pause: the worker applies what was held, oldest first
  rebuild --since 30d|ISO [--until ISO] [--endpoint E] [--type T] [--account acct_…] [--rate 100] [--dry-run] [--restart]
                                          run the events received in a window through today's handlers again (each
                                          booked once: the handlers' business keys), counts first, at --rate events/s;
                                          Ctrl-C or a crash: the same command continues where it stopped
  purge [--older-than D] [--payloads-older-than 31d] [--force] [--dry-run] [--batch N]
                                          delete settled rows' keys past each provider's window (default: 31 d, Paddle
                                          and Standard Webhooks 91 d) and payloads past 31 d, by weekly partition;
                                          never unprocessed or needs-review rows; --dry-run only counts, needs no --force
  outbox [--needs-review] [--limit N]     unpublished outbox rows, oldest first: attempts, last error
  outbox-requeue <id>… [--dry-run]        needs-review outbox rows back to the dispatcher, attempts reset
  migrate                                 apply pending sql/ migrations`;

class UsageError extends Error {}

const {
  values: opts,
  positionals,
  tokens,
} = (() => {
  try {
    return parseArgs({
      allowPositionals: true,
      tokens: true,
      options: {
        json: { type: "boolean", default: false },
        "needs-review": { type: "boolean", default: false },
        unprocessed: { type: "boolean", default: false },
        type: { type: "string" },
        endpoint: { type: "string" },
        account: { type: "string" },
        provider: { type: "string", default: "stripe" },
        since: { type: "string" },
        limit: { type: "string", default: "50" },
        payload: { type: "boolean", default: false },
        id: { type: "string" },
        error: { type: "string" },
        attempts: { type: "string" },
        text: { type: "string" },
        note: { type: "string" },
        "dry-run": { type: "boolean", default: false },
        "older-than": { type: "string" },
        "payloads-older-than": { type: "string" },
        force: { type: "boolean", default: false },
        batch: { type: "string", default: "1000" },
        until: { type: "string" },
        rate: { type: "string", default: "100" },
        restart: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (err) {
    console.error(`${err instanceof Error ? err.message : String(err)}\n\n${USAGE}`);
    process.exit(2);
  }
})();

const [command, ...args] = positionals;

/**
 * What each command accepts: its options (besides --json and --help) and how many positional
 * arguments. Anything else is a usage error rather than silently ignored: `requeue evt_X` without
 * --id would otherwise match every needs-review row.
 */
const FILTER = ["type", "endpoint", "account", "since", "id", "error", "attempts"];
const ACCEPTS: Record<string, { options: string[]; positionals: [min: number, max: number] }> = {
  status: { options: [], positionals: [0, 0] },
  list: { options: [...FILTER, "needs-review", "unprocessed", "text", "limit"], positionals: [0, 0] },
  // --id, as everywhere; the event id as the one argument still works (the form before --id was everywhere).
  show: { options: ["id", "payload"], positionals: [0, 1] },
  requeue: { options: [...FILTER, "dry-run"], positionals: [0, 0] },
  resolve: { options: [...FILTER, "note", "dry-run"], positionals: [0, 0] },
  replay: { options: ["id", "endpoint", "provider"], positionals: [0, 1] },
  pause: { options: ["endpoint", "account", "note", "force"], positionals: [0, 0] },
  resume: { options: ["endpoint", "account"], positionals: [0, 0] },
  rebuild: { options: ["since", "until", "endpoint", "type", "account", "rate", "dry-run", "restart"], positionals: [0, 0] },
  purge: { options: ["older-than", "payloads-older-than", "force", "dry-run", "batch"], positionals: [0, 0] },
  outbox: { options: ["needs-review", "limit"], positionals: [0, 0] },
  "outbox-requeue": { options: ["dry-run"], positionals: [1, Number.POSITIVE_INFINITY] },
  migrate: { options: [], positionals: [0, 0] },
};

/** The usage problem of this command line, if any (unknown commands are reported by run()). */
function usageProblem(): string | undefined {
  const accepts = command === undefined ? undefined : ACCEPTS[command];
  if (!accepts) return undefined;
  const given = tokens.flatMap((t) => (t.kind === "option" && t.name !== "json" && t.name !== "help" ? [t.name] : []));
  const foreign = [...new Set(given.filter((name) => !accepts.options.includes(name)))];
  if (foreign.length) return `${command} does not take ${foreign.map((n) => `--${n}`).join(", ")}`;
  const [min, max] = accepts.positionals;
  if (command === "show" || command === "replay") {
    if (opts.id !== undefined && args.length > 0) return `${command} takes the event id once: --id ${opts.id} or "${args[0]}", not both`;
    if (opts.id === undefined && args.length === 0) return `${command} needs the event: --id evt_…`;
  }
  if (args.length < min || args.length > max) {
    if (max === 0)
      return `${command} takes no arguments, got ${args.map((a) => `"${a}"`).join(" ")}${/^evt_/.test(args[0] ?? "") ? ` (an event id goes in --id ${args[0]})` : ""}`;
    return `${command} takes ${min === max ? `exactly ${min}` : min === 0 ? `at most ${max}` : `at least ${min}`} argument(s), got ${args.length}`;
  }
  return undefined;
}

if (opts.help || !command) {
  console.log(USAGE);
  process.exit(command || opts.help ? 0 : 2);
}

/**
 * `value` as JSON with --json, else `table` as a table (or `value` as text). Text from events (types,
 * ids, errors) is shown with control and bidirectional characters escaped (`\x1b`, `\u202e`); JSON
 * keeps the exact strings, with the same characters as `\uXXXX` escapes (see printable.ts).
 */
function print(value: unknown, table?: Record<string, unknown>[]): void {
  if (opts.json) console.log(printableJson(value));
  else if (table) table.length ? console.table(table.map(printableRow)) : console.log("(none)");
  else console.log(typeof value === "string" ? printable(value) : value);
}

function wholeNumber(name: string, raw: string, min = 1): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min)
    throw new UsageError(`--${name} must be a whole number ≥ ${min}, got "${raw}"`);
  return n;
}

function duration(name: string, raw: string): number {
  try {
    return parseDuration(raw);
  } catch (err) {
    throw new UsageError(`--${name}: ${(err as Error).message}`);
  }
}

/** Whether the YYYY-MM-DD at the start of `text` is a day of the calendar (Date rolls 2026-02-31 over to March). */
function realDate(text: string): boolean {
  const [y, m, d] = text.slice(0, 10).split("-").map(Number) as [number, number, number];
  const day = new Date(Date.UTC(y, m - 1, d));
  return day.getUTCFullYear() === y && day.getUTCMonth() === m - 1 && day.getUTCDate() === d;
}

/** A time option: a duration back from now (`2h`, `30d`) or an ISO 8601 date or date-time. */
function timeArg(name: string, raw: string): Date {
  // An ISO 8601 date or date-time (2026-11-30, 2026-11-30T12:00:00Z); JavaScript's Date would also read "5" as a date.
  const iso = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/.test(raw) && realDate(raw);
  const at = /^\d+(ms|s|m|h|d)$/.test(raw) ? new Date(Date.now() - duration(name, raw)) : iso ? new Date(raw) : new Date(Number.NaN);
  if (Number.isNaN(at.getTime())) throw new UsageError(`--${name} must be a duration (2h) or an ISO time, got "${raw}"`);
  return at;
}

function filter(): RowFilter {
  if (opts["needs-review"] && opts.unprocessed) throw new UsageError("Choose one of --needs-review and --unprocessed");
  const since = opts.since ? timeArg("since", opts.since) : undefined;
  return {
    state: opts["needs-review"] ? "needs_review" : opts.unprocessed ? "unprocessed" : undefined,
    eventType: opts.type,
    endpoint: opts.endpoint,
    since,
    eventId: opts.id,
    account: opts.account === undefined ? undefined : opts.account === "platform" ? "" : opts.account,
    error: opts.error,
    minAttempts: opts.attempts === undefined ? undefined : wholeNumber("attempts", opts.attempts, 0),
  };
}

/** Refuses to run against a schema older than the code (except `migrate`), naming the fix. */
async function checkSchema(db: Db): Promise<void> {
  if (command === "migrate") return;
  const expected = loadMigrations().length;
  const [row] = await db<{ version: number }[]>`
    select coalesce(max(version), 0)::int as version
      from schema_migrations
  `.catch((err: unknown) => {
    // No schema_migrations table yet: nothing applied. Anything else (unreachable, refused login,
    // missing database) is reported as it is, not as a schema problem.
    if (sqlState(err) === SQLSTATE.undefinedTable) return [{ version: 0 }];
    if (isConnectFailure(err)) throw err;
    throw new Error(`Cannot read the schema version: ${describeError(err)}`);
  });
  if ((row?.version ?? 0) < expected) {
    throw new Error(
      `Database schema is at migration ${row?.version ?? 0}, this code needs ${expected}: run \`bun run inbox migrate\` first`,
    );
  }
}

async function run(db: Db): Promise<number> {
  await checkSchema(db);
  switch (command) {
    case "status": {
      const s = await inboxStatus(db);
      if (opts.json) return (print(s), 0);
      console.log("backlog (unprocessed rows wait for a worker; needs-review rows wait for an operator)");
      print(
        s,
        s.backlog.map((b) => ({
          endpoint: b.endpoint,
          unprocessed: b.unprocessed,
          oldest_age_s: Math.round(b.oldestUnprocessedAgeSec),
          needs_review: b.needsReview,
        })),
      );
      console.log("outbox (pending rows wait for `bun run dispatch`; needs-review rows wait for an operator)");
      print(s, [{ pending: s.outbox.pending, oldest_age_s: Math.round(s.outbox.oldestPendingAgeSec), needs_review: s.outbox.needsReview }]);
      console.log(`arrivals over the last ${s.windowSec / 60} min`);
      print(
        s,
        s.arrivals.map((a) => ({
          endpoint: a.endpoint,
          type: a.eventType,
          received: a.received,
          processed: a.processed,
          ignored: a.ignored,
          ignored_mode: a.ignoredMode,
          resolved: a.resolved,
          unprocessed: a.unprocessed,
          needs_review: a.needsReview,
        })),
      );
      console.log(
        "event backfill (`bun run reconcile events`): every event Stripe listed before covered_until is recorded; past 30 days a gap cannot be backfilled",
      );
      print(
        s,
        s.backfill.map((b) => ({ endpoint: b.endpoint, covered_until: b.coveredUntil, age_s: Math.round(b.ageSec) })),
      );
      console.log("backfill requests not finished (after a failover or a Stripe health notice), each with the run that finishes them");
      print(
        s,
        s.backfillRequests.map(({ command, oldestAgeSec, ...r }) => ({ ...r, oldest_age_s: Math.round(oldestAgeSec), command })),
      );
      console.log("workers and dispatchers of the last day (dead: 3 heartbeats missed; stopped: stopped cleanly)");
      print(
        s,
        s.processes.map((p) => ({
          kind: p.kind,
          state: p.state,
          host: p.host,
          pid: p.pid,
          serves: p.detail,
          beat_age_s: Math.round(p.beatAgeSec),
          last_claim_age_s: p.lastClaimAgeSec === null ? "" : Math.round(p.lastClaimAgeSec),
          claimed: p.claimed,
        })),
      );
      console.log("paused (events recorded and answered 2xx, nothing applied; held rows wait for `bun run inbox resume`)");
      print(s, s.pauses.map(pauseColumns));
      return 0;
    }
    case "list": {
      const rows = (await pageEvents(db, filter(), { limit: wholeNumber("limit", opts.limit), text: opts.text })).rows;
      print(
        rows,
        rows.map((r) => ({ ...eventColumns(r), last_error: r.lastError ?? "" })),
      );
      return 0;
    }
    case "show": {
      const eventId = eventIdOf(); // usageProblem: --id or the one argument
      const rows = await showEvent(db, eventId, opts.payload);
      if (rows.length === 0) {
        console.error(`No inbox row for ${printable(eventId)}`);
        return 1;
      }
      print(
        rows,
        rows.map((r) => ({
          ...eventColumns(r),
          processed_at: r.processedAt ?? "",
          needs_review_at: r.needsReviewAt ?? "",
          last_error: r.lastError ?? "",
          payload_dropped: r.payloadDropped,
        })),
      );
      if (opts.json || !opts.payload) return 0;
      for (const r of rows) {
        // The whole payload as indented JSON (escaped like --json), or the exact raw body jsonb could not
        // hold, line by line as the sender wrote it (every other control character escaped).
        console.log(
          `payload at endpoint ${printable(r.endpoint)}${r.rawBody === undefined ? "" : " (raw body: jsonb could not hold it)"}:`,
        );
        console.log(r.rawBody === undefined ? printableJson(r.payload) : r.rawBody.split("\n").map(printable).join("\n"));
      }
      return 0;
    }
    case "requeue": {
      const result = await requeue(db, filter(), opts["dry-run"]);
      if (opts.json) return (print(result), 0);
      console.log(`${result.dryRun ? "Would requeue" : "Requeued"} ${result.rows.length} needs-review row(s)`);
      print(
        result,
        result.rows.map((r) => ({
          event_id: r.eventId,
          endpoint: r.endpoint,
          type: r.eventType,
          attempts_before: r.attempts,
          last_error: r.lastError ?? "",
        })),
      );
      return 0;
    }
    case "resolve": {
      const f = filter();
      if (!f.eventId && !f.eventType && !f.error)
        throw new UsageError("resolve needs --id, --type or --error: it never closes every needs-review row at once");
      if (!opts.note?.trim()) throw new UsageError("resolve needs --note TEXT: what was done about the event (kept on the row)");
      const result = await resolveReviewed(db, f, opts.note, opts["dry-run"]);
      if (opts.json) return (print(result), 0);
      console.log(`${result.dryRun ? "Would resolve" : "Resolved"} ${result.rows.length} needs-review row(s)`);
      print(
        result,
        result.rows.map((r) => ({ event_id: r.eventId, endpoint: r.endpoint, type: r.eventType, last_error: r.lastError ?? "" })),
      );
      return 0;
    }
    case "replay": {
      const eventId = eventIdOf(); // usageProblem: --id or the one argument
      const rows = await showEvent(db, eventId);
      const candidates = rows.filter((r) => r.provider === opts.provider && (!opts.endpoint || r.endpoint === opts.endpoint));
      const [row] = candidates;
      if (!row) throw new Error(`Cannot replay ${eventId}: no inbox row${opts.endpoint ? ` at endpoint ${opts.endpoint}` : ""}`);
      if (candidates.length > 1)
        throw new UsageError(
          `${eventId} was received by several endpoints (${candidates.map((r) => r.endpoint).join(", ")}): pass --endpoint`,
        );
      const result = await replayEvent(
        db,
        { provider: row.provider, endpoint: row.endpoint, eventId },
        handlersFor(row.provider),
        configuredLivemode(row.provider, row.endpoint),
      );
      if (opts.json) return (print(result), 0);
      console.log(
        result.handled
          ? `Replayed ${printable(eventId)} (${printable(result.eventType)}) at ${printable(`${row.provider}/${row.endpoint}`)}: ${result.inserted} row(s) inserted, ${result.updated} updated, ${result.deleted} deleted`
          : `Nothing to replay: ${printable(eventId)} (${printable(result.eventType)}) has no handler`,
      );
      return 0;
    }
    case "pause": {
      const scope = await pauseScope(db, true);
      const result = await pauseEndpoint(db, scope, opts.note);
      // Paused, but what had begun applying before it may still commit: the operator must not start the maintenance yet.
      const quiet = result.stillApplying === 0;
      if (opts.json) return (print(result), quiet ? 0 : 1);
      console.log(
        result.paused
          ? `Paused ${describeScope(result)}: its events are recorded and answered 2xx, nothing is applied until \`bun run inbox resume ${scopeArgs(result)}\``
          : `${describeScope(result)} was paused already, since ${result.pausedAt}${result.note ? ` ("${printable(result.note)}")` : ""}: nothing changed`,
      );
      if (!quiet)
        console.error(
          `${result.stillApplying} transaction(s) that began applying events of ${printable(scope.endpoint)} before the pause were still running ` +
            `after ${PAUSE_WAIT_MS / 1000} s: they may still commit (each ends at its own bound); run the same pause again to wait for them`,
        );
      return quiet ? 0 : 1;
    }
    case "resume": {
      const scope = await pauseScope(db, false);
      const result = await resumeEndpoint(db, scope);
      if (opts.json) return (print(result), 0);
      if (!result.resumed) console.log(`${describeScope(result)} was not paused: nothing changed`);
      else {
        const waiting = (await readBacklog(db)).filter((b) => b.endpoint === scope.endpoint).reduce((n, b) => n + b.unprocessed, 0);
        console.log(
          `Resumed ${describeScope(result)}, paused since ${result.pausedAt}: workers were woken to apply what it held, oldest first ` +
            `(${waiting} unprocessed row(s) at the endpoint now; an endpoint in sync mode needs \`bun run worker\` running for them)`,
        );
      }
      if (result.remaining.length > 0) {
        console.log(`Still paused at ${printable(scope.endpoint)}:`);
        print(result, result.remaining.map(pauseColumns));
      }
      return 0;
    }
    case "rebuild":
      return rebuild(db);
    case "purge": {
      const result = await purge(db, {
        olderThanMs: opts["older-than"] ? duration("older-than", opts["older-than"]) : undefined,
        payloadsOlderThanMs: opts["payloads-older-than"] ? duration("payloads-older-than", opts["payloads-older-than"]) : undefined,
        force: opts.force,
        dryRun: opts["dry-run"],
        batchSize: wholeNumber("batch", opts.batch),
      });
      if (opts.json) return (print(result), 0);
      const would = (done: string, notYet: string) => (result.dryRun ? notYet : done);
      // In days as the floor is given; a forced horizon under a day in hours or seconds ("stripe 0 d" said nothing).
      const span = (ms: number) =>
        ms >= 86_400_000
          ? `${Math.round(ms / 8_640_000) / 10} d`
          : ms >= 3_600_000
            ? `${Math.round(ms / 360_000) / 10} h`
            : `${Math.round(ms / 1000)} s`;
      const kept = result.keyRetention.map((k) => `${k.provider} ${span(k.olderThanMs)}`).join(", ");
      console.log(
        `${would("Deleted", "Would delete")} ${result.deleted} settled row(s) past their key retention (${kept || "no rows"})` +
          `, ${result.outboxDeleted} published outbox message(s), ${result.claimsDeleted} change claim(s), ${result.backfillRequestsDeleted} finished backfill request(s)` +
          `; ${would("dropped", "would drop")} ${result.payloadsDropped} payload(s)` +
          (result.partitionsDropped.length
            ? ` (${result.partitionsDropped.length} weekly partition(s): ${result.partitionsDropped.join(", ")}; ${result.openPayloadsMoved} payload(s) of unsettled rows in them ${would("moved", "would move")} to webhook_inbox_payloads_default)`
            : ""),
      );
      if (result.forceRequired) console.log(`The real run needs --force: ${result.forceRequired}`);
      return 0;
    }
    case "outbox": {
      const rows = await listOutbox(db, { needsReview: opts["needs-review"] }, wholeNumber("limit", opts.limit));
      print(
        rows,
        rows.map((r) => ({
          id: r.id,
          aggregate: `${r.aggregateType}/${r.aggregateId}`,
          type: r.eventType,
          state: r.state,
          attempts: r.attempts,
          created_at: r.createdAt,
          last_error: r.lastError ?? "",
        })),
      );
      return 0;
    }
    case "outbox-requeue": {
      const bad = args.filter((id) => !/^[1-9]\d{0,18}$/.test(id) || BigInt(id) > 9_223_372_036_854_775_807n); // bigint range
      if (bad.length) throw new UsageError(`Outbox ids are whole numbers ≥ 1 (bigint), got ${bad.map((id) => `"${id}"`).join(", ")}`);
      const ids = opts["dry-run"]
        ? (await listOutbox(db, { needsReview: true, ids: args }, args.length)).map((r) => r.id)
        : await requeueOutbox(db, args);
      const skipped = args.filter((id) => !ids.includes(id));
      if (opts.json) return (print({ dryRun: opts["dry-run"], requeued: ids, notParked: skipped }), 0);
      console.log(
        `${opts["dry-run"] ? "Would requeue" : "Requeued"} ${ids.length} needs-review outbox row(s)${ids.length ? `: ${ids.join(", ")}` : ""}`,
      );
      if (skipped.length) console.log(`Not parked (published, pending or unknown), left alone: ${skipped.join(", ")}`);
      return 0;
    }
    case "migrate": {
      const applied = await migrate(db, loadMigrations(), loadAppMigrations());
      print(opts.json ? { applied } : applied.length ? `Applied ${applied.join(", ")}` : "Nothing to apply: the schema is current");
      return 0;
    }
    default:
      throw new UsageError(`Unknown command "${command}"`);
  }
}

/** The event `show` and `replay` name: `--id`, or their one argument. */
function eventIdOf(): string {
  return opts.id ?? (args[0] as string);
}

/**
 * The scope of `pause` and `resume` from --endpoint and --account. A pause must name an endpoint this
 * configuration serves or the inbox holds rows of (a typo would otherwise hold nothing); resume names the
 * pause to lift, whatever it is.
 */
async function pauseScope(db: Db, pausing: boolean): Promise<PauseScope> {
  const endpoint = opts.endpoint;
  if (!endpoint) throw new UsageError(`${command} needs --endpoint NAME`);
  const account = opts.account;
  if (account !== undefined && !/^acct_[A-Za-z0-9]+$/.test(account))
    throw new UsageError(
      `--account must be a connected account's id (acct_…), got "${account}"; without it the whole endpoint is ${command}d`,
    );
  if (pausing && account !== undefined && !opts.force) {
    const [seen] = await db<{ seen: boolean }[]>`
      select exists (select 1 from webhook_inbox where endpoint = ${endpoint} and account = ${account}) as seen
    `;
    if (!seen?.seen)
      throw new UsageError(
        `No event of account ${printable(account)} has reached endpoint ${printable(endpoint)}: a typo would hold nothing of the account you meant ` +
          "(--force pauses it anyway, before its first event)",
      );
  }
  if (pausing) {
    const configured = configuredEndpointNames();
    const [seen] = configured.includes(endpoint)
      ? [{ seen: true }]
      : await db<{ seen: boolean }[]>`
      select exists (select 1 from webhook_inbox where endpoint = ${endpoint}) as seen
    `;
    if (!seen?.seen)
      throw new UsageError(
        `No endpoint named "${endpoint}": it is not configured here (${configured.join(", ") || "none"}) and the inbox holds no rows of it`,
      );
  }
  return { endpoint, account };
}

/** Endpoint names this environment configures: the Stripe ones (billing first) and `WEBHOOK_ENDPOINTS`'s. */
function configuredEndpointNames(): string[] {
  let stripe: string[] = [];
  try {
    stripe = loadEndpointsWithoutSecrets(process.env).map((e) => e.name);
  } catch {
    stripe = ["billing"];
  }
  return [...new Set([...stripe, ...commaList(process.env.WEBHOOK_ENDPOINTS).map((entry) => entry.split("/")[1] ?? "")])].filter(Boolean);
}

function describeScope(scope: { endpoint: string; account: string }): string {
  return `endpoint ${printable(scope.endpoint)}${scope.account ? ` (account ${printable(scope.account)})` : " (every account)"}`;
}

function scopeArgs(scope: { endpoint: string; account: string }): string {
  return `--endpoint ${printable(scope.endpoint)}${scope.account ? ` --account ${printable(scope.account)}` : ""}`;
}

function pauseColumns(p: Pause) {
  return {
    endpoint: p.endpoint,
    account: p.account || "(every account)",
    paused_at: p.pausedAt,
    age_s: Math.round(p.ageSec),
    held: p.held,
    note: p.note ?? "",
  };
}

/**
 * `inbox rebuild`: the window's counts first (and the rows retention made unrebuildable), then the run
 * (src/ops/rebuild.ts) with a progress bar on a terminal (plain lines otherwise), resumed when an
 * unfinished run of the same scope exists. Ctrl-C stops after the current event; a second one exits.
 * Exit 0 when the run reached the end with no event failing, 1 otherwise.
 */
async function rebuild(db: Db): Promise<number> {
  if (!opts.since)
    throw new UsageError("rebuild needs --since (a duration such as 30d, or an ISO time): the window of recorded events to run again");
  if (opts.account !== undefined && !/^acct_[A-Za-z0-9]+$/.test(opts.account))
    throw new UsageError(`--account must be a connected account's id (acct_…), got "${opts.account}"`);
  const rate = wholeNumber("rate", opts.rate);
  const args = {
    since: opts.since,
    until: opts.until ?? null,
    endpoint: opts.endpoint ?? null,
    type: opts.type ?? null,
    account: opts.account ?? null,
  };
  const fresh = { since: timeArg("since", opts.since), until: opts.until ? timeArg("until", opts.until) : new Date() };
  if (fresh.until <= fresh.since)
    throw new UsageError(`--until (${fresh.until.toISOString()}) must be after --since (${fresh.since.toISOString()})`);
  const tables = (provider: string) => handlersFor(provider);
  if (opts.restart && !opts["dry-run"]) {
    const left = await abandonRebuild(db, args);
    if (left && !opts.json) console.log(`Gave up rebuild ${left.id} (started ${left.startedAt}) at ${left.done} of ${left.total}`);
  }
  let run = await findRebuild(db, args);
  const window = {
    since: run?.since ?? fresh.since,
    until: run?.until ?? fresh.until,
    endpoint: opts.endpoint,
    eventType: opts.type,
    account: opts.account,
  };
  const counts = await countRebuild(db, window, tables);
  const lost = await notRebuildable(db, window, opts.json ? 1_000 : 20);
  const head = { window: { since: window.since.toISOString(), until: window.until.toISOString() }, counts, notRebuildable: lost };
  if (!opts.json) {
    console.log(
      `Events received from ${head.window.since} until ${head.window.until}${run ? ` (rebuild ${run.id}, started ${run.startedAt}: ${run.done} of ${run.total} done)` : ""}:`,
    );
    print(head, [
      { rows: "in the window", count: counts.rows },
      { rows: "to run through today's handlers", count: counts.toRun },
      { rows: "no handler applies them now (passed)", count: counts.noHandler },
      { rows: "not rebuildable: payload dropped by retention", count: counts.payloadDropped },
      ...Object.entries(counts.leftAlone).map(([state, n]) => ({ rows: `left alone: ${state}`, count: n })),
    ]);
    if (lost.length > 0) {
      console.log(
        `Not rebuildable (payload dropped by retention)${counts.payloadDropped > lost.length ? `, the first ${lost.length} of ${counts.payloadDropped}` : ""}:`,
      );
      print(
        lost,
        lost.map((r) => ({ event_id: r.eventId, endpoint: r.endpoint, type: r.eventType, received_at: r.receivedAt })),
      );
    }
  }
  if (opts["dry-run"]) return (opts.json && print({ ...head, dryRun: true }), 0);
  if (!run) {
    if (counts.toRun === 0) return (print(opts.json ? { ...head, status: "nothing" } : "Nothing to rebuild"), 0);
    run = await startRebuild(db, args, window, counts.toRun);
  }
  const stop = new AbortController();
  onStopSignals(
    () => stop.abort(),
    () => process.exit(1),
  );
  const progress = progressWriter();
  const outcome = await runRebuild(db, run, {
    tables,
    ratePerSec: rate,
    owner: `${hostname()}:${process.pid}:${crypto.randomUUID().slice(0, 8)}`,
    ownerGone: processGone,
    signal: stop.signal,
    onProgress: progress.show,
  });
  progress.end();
  const r = outcome.rebuild;
  if (opts.json) print({ ...head, status: outcome.status, reason: outcome.reason, rebuild: r, failures: outcome.failures });
  else {
    console.log(
      `Rebuild ${r.id} ${outcome.status === "done" ? "finished" : outcome.status}: ${r.done} of ${r.total} event(s) gone through, ${r.failed} failed; ` +
        `the handlers wrote ${r.inserted} row(s) inserted, ${r.updated} updated, ${r.deleted} deleted` +
        (outcome.reason ? `\n${outcome.reason}` : ""),
    );
    if (outcome.failures.length > 0) {
      console.log(
        `Failed (each rolled back and passed, its row left as it was: fix the handler or the data, then \`bun run inbox replay --id …\` each${outcome.rebuild.failed > outcome.failures.length ? `; the first ${outcome.failures.length} of ${outcome.rebuild.failed} shown` : ""}):`,
      );
      print(
        outcome.failures,
        outcome.failures.map((f) => ({ event_id: f.eventId, endpoint: f.endpoint, error: f.error })),
      );
    }
  }
  return outcome.status === "done" && r.failed === 0 ? 0 : 1;
}

/** Whether a rebuild lease's owner (`host:pid:…`) is a process of this host that no longer runs (killed, crashed, stopped). */
function processGone(owner: string): boolean {
  const [host, pid] = owner.split(":");
  if (host !== hostname() || !/^\d+$/.test(pid ?? "")) return false;
  try {
    process.kill(Number(pid), 0);
    return false;
  } catch (err) {
    return (err as { code?: string }).code === "ESRCH";
  }
}

/**
 * Rebuild progress on stderr: a bar redrawn in place on a terminal (at most 10 times a second), else a
 * plain line every 1,000 events or 10 s, whichever comes first (none with --json off a terminal).
 */
function progressWriter(): { show: (p: RebuildProgress) => void; end: () => void } {
  const tty = process.stderr.isTTY === true;
  let shownAt = 0;
  let shownDone = 0;
  let drawn = false;
  const line = (p: RebuildProgress) => {
    if (p.waitingMs !== undefined)
      return `waiting up to ${Math.ceil(p.waitingMs / 1000)} s for the lease of a run that stopped without giving it back`;
    const share = p.total > 0 ? Math.min(1, p.done / p.total) : 1;
    const eta = p.perSec > 0 ? Math.max(0, Math.round((p.total - p.done) / p.perSec)) : 0;
    return `${p.done}/${p.total} (${Math.floor(share * 100)} %), ${p.failed} failed, ${p.perSec.toFixed(0)}/s, about ${eta} s left`;
  };
  return {
    show(p) {
      const now = Date.now();
      if (tty) {
        if (now - shownAt < 100 && p.done < p.total) return;
        const width = 30;
        const filled = p.total > 0 ? Math.round(Math.min(1, p.done / p.total) * width) : width;
        process.stderr.write(`\r\x1b[2K[${"#".repeat(filled)}${".".repeat(width - filled)}] ${line(p)}`);
        drawn = true;
      } else if (!opts.json && (p.done - shownDone >= 1_000 || now - shownAt >= 10_000 || p.waitingMs !== undefined)) {
        console.error(`rebuild: ${line(p)}`);
        shownDone = p.done;
      } else return;
      shownAt = now;
    },
    end() {
      if (drawn) process.stderr.write("\n");
    },
  };
}

/** The columns `list` and `show` begin with. */
function eventColumns(r: EventSummary) {
  return {
    event_id: r.eventId,
    endpoint: r.endpoint,
    account: r.account || "platform",
    type: r.eventType,
    state: r.state,
    attempts: r.attempts,
    received_at: r.receivedAt,
  };
}

/**
 * The Stripe mode `STRIPE_MODE[_<NAME>]` (or the API key) gives endpoint `endpoint` now: true live,
 * false test, undefined when none is set, the provider is not Stripe's, or the settings cannot be read.
 */
function configuredLivemode(provider: string, endpoint: string): boolean | undefined {
  if (provider !== "stripe" && provider !== "stripe-thin") return undefined;
  try {
    return loadEndpointsWithoutSecrets(process.env).find((e) => e.name === endpoint)?.livemode;
  } catch {
    return undefined;
  }
}

const problem = usageProblem(); // before any database is opened
if (problem) {
  console.error(`${problem}\n\n${USAGE}`);
  process.exit(2);
}

let code: number;
const { db } = await openCommandDatabase(process.env, "webhook-inbox inbox", 2);
try {
  code = await run(db);
} catch (err) {
  if (err instanceof UsageError) {
    console.error(`${err.message}\n\n${USAGE}`);
    code = 2;
  } else {
    console.error(isConnectFailure(err) ? cannotConnectMessage(err) : err instanceof Error ? err.message : String(err));
    code = 1;
  }
} finally {
  await db.end({ timeout: 5 });
}
process.exit(code!);
