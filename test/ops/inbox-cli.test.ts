// The real `bun run inbox` CLI (src/bin/inbox.ts) as a subprocess against this file's database:
// exit codes (0 ok, 1 failure, 2 usage), the --json output of each command, and the schema check.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { PermanentError } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { migrate } from "../../src/db/migrate.ts";
import type { EventSummary } from "../../src/ops/events.ts";
import type { PurgeResult } from "../../src/ops/purge.ts";
import type { ReplayResult } from "../../src/ops/replay.ts";
import type { RequeueResult } from "../../src/ops/requeue.ts";
import type { InboxStatus } from "../../src/ops/status.ts";
import { receiveAsync, receiveSync, recordFallback, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { insertInbox, rawOnlyRow } from "../../src/inbox/inbox.ts";
import { backdateInbox, count, eventBody, freshDatabase, inboxRowsOf, invoice, verified } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices`;
});

const REPO = join(import.meta.dir, "..", "..");
/** Bound on one CLI run; the tests that spawn several get a multiple of it. */
const RUN_MS = 20_000;
const WAITS = 60_000;
const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
const PAYMENTS: ReceiveTarget = { ...BILLING, endpoint: "payments" };
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
const DAY_MS = 86_400_000;

interface Run {
  code: number | null;
  /** Set when the run was killed (e.g. by the RUN_MS bound). */
  signal: string | number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `bun src/bin/inbox.ts ...args` from the repository root with DATABASE_URL set to `url`; killed
 * after RUN_MS. `process.execPath` is the bun running this test, so the CLI runs on the same version.
 */
async function inbox(args: string[], url = fresh.url): Promise<Run> {
  const proc = Bun.spawn([process.execPath, "src/bin/inbox.ts", ...args], {
    cwd: REPO,
    env: { ...process.env, DATABASE_URL: url },
    stdout: "pipe",
    stderr: "pipe",
    timeout: RUN_MS,
  });
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code: proc.exitCode, signal: proc.signalCode, stdout, stderr };
}

/** Runs the CLI, expects exit 0 and parses its stdout as JSON. */
async function inboxJson<T>(args: string[], url = fresh.url): Promise<T> {
  const run = await inbox([...args, "--json"], url);
  expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
  return JSON.parse(run.stdout) as T;
}

let seq = 0;
function event(type = "invoice.paid", overrides: Record<string, unknown> = {}): { eventId: string; invoiceId: string; body: string } {
  const n = ++seq;
  const eventId = `evt_cli_${n}`;
  const invoiceId = `in_cli_${n}`;
  return {
    eventId,
    invoiceId,
    body: eventBody(
      eventId,
      type,
      invoice({ id: invoiceId, customer: "cus_payload_marker", amount_paid: 2000, status: "paid", ...overrides }),
    ),
  };
}

async function processed(type = "invoice.paid", target = BILLING) {
  const e = event(type);
  expect(await receiveSync(db, target, verified(e.body))).toBe("processed");
  return e;
}

async function queued(target = BILLING) {
  const e = event();
  expect(await receiveAsync(db, target, verified(e.body))).toBe("queued");
  return e;
}

/** A needs-review row, parked the way the receiver parks a PermanentError. */
async function parked(message: string, target = BILLING) {
  const e = event();
  const outcome = await recordFallback(db, target, verified(e.body), new PermanentError(message), BACKOFF);
  expect(outcome).toBe("needs_review");
  return e;
}

async function stateOf(eventId: string, endpoint = "billing"): Promise<{ state: string; attempts: number; due: boolean } | undefined> {
  const [row] = await db<{ state: string; attempts: number; due: boolean }[]>`
    select state, attempts, available_at <= now() as due
      from webhook_inbox_state
     where endpoint = ${endpoint}
       and event_id = ${eventId}
  `;
  return row;
}

describe("inbox CLI", () => {
  test(
    "`inbox status --json` reports the backlog per endpoint, the outbox backlog and the last hour's arrivals",
    async () => {
      await processed();
      const [parkedOutbox] = await db<{ id: string }[]>`
      insert into outbox (aggregate_type, aggregate_id, event_type, payload, created_at, needs_review_at, last_error)
      values ('invoice', 'in_cli_parked', 'InvoicePaymentBooked', '{}', now() - interval '1 hour', now(), 'Error: sink down')
      returning id::text as id
    `;
      expect(parkedOutbox).toBeDefined();
      await queued();
      await queued(PAYMENTS);
      await parked("Cannot apply invoice event: missing or invalid field(s) customer");
      const status = await inboxJson<InboxStatus>(["status"]);
      expect(status.windowSec).toBe(3_600);
      // processed() booked one payment: one pending outbox row; the parked one is older but not pending.
      expect(status.outbox).toMatchObject({ pending: 1, needsReview: 1 });
      expect(status.outbox.oldestPendingAgeSec).toBeLessThan(600);
      expect(status.backlog.map(({ oldestUnprocessedAgeSec: _, ...b }) => b)).toEqual([
        { provider: "stripe", endpoint: "billing", unprocessed: 1, needsReview: 1 },
        { provider: "stripe", endpoint: "payments", unprocessed: 1, needsReview: 0 },
      ]);
      expect(status.arrivals).toEqual([
        {
          provider: "stripe",
          endpoint: "billing",
          eventType: "invoice.paid",
          received: 3,
          processed: 1,
          ignored: 0,
          ignoredMode: 0,
          resolved: 0,
          unprocessed: 1,
          needsReview: 1,
        },
        {
          provider: "stripe",
          endpoint: "payments",
          eventType: "invoice.paid",
          received: 1,
          processed: 0,
          ignored: 0,
          ignoredMode: 0,
          resolved: 0,
          unprocessed: 1,
          needsReview: 0,
        },
      ]);
      const text = await inbox(["status"]);
      expect(text.code).toBe(0);
      expect(text.stdout).toContain("backlog");
      expect(text.stdout).toContain("outbox");
      // The endpoint column shows what --endpoint takes, in status as in list.
      expect(text.stdout).toContain("│ billing ");
      expect(text.stdout).not.toContain("stripe/billing");
      const listed = await inbox(["list"]);
      expect(listed.stdout).toContain("│ billing ");
    },
    WAITS,
  );

  test(
    "`inbox outbox --json` lists unpublished outbox rows; `outbox-requeue` puts only parked ones back, --dry-run changes nothing",
    async () => {
      const paid = await processed(); // one pending InvoicePaymentBooked row
      const inserted = await db<{ id: string }[]>`
      insert into outbox (aggregate_type, aggregate_id, event_type, payload, attempts, needs_review_at, published_at, last_error)
      values ('invoice', 'in_cli_parked', 'InvoicePaymentBooked', '{}', 10, now(), null, 'Error: sink down'),
             ('invoice', 'in_cli_done', 'InvoicePaymentBooked', '{}', 1, null, now(), null)
      returning id::text as id
    `;
      const [parkedRow, published] = inserted as unknown as [{ id: string }, { id: string }];
      type Listed = { id: string; aggregateId: string; state: string; attempts: number; lastError: string | null }[];
      const pick = (rows: Listed) =>
        rows.map(({ id, aggregateId, state, attempts, lastError }) => ({ id, aggregateId, state, attempts, lastError }));

      const all = pick(await inboxJson<Listed>(["outbox"]));
      expect(all.map((r) => [r.aggregateId, r.state])).toEqual([
        [paid.invoiceId, "pending"],
        ["in_cli_parked", "needs_review"],
      ]);
      expect(pick(await inboxJson<Listed>(["outbox", "--needs-review"]))).toEqual([
        { id: parkedRow.id, aggregateId: "in_cli_parked", state: "needs_review", attempts: 10, lastError: "Error: sink down" },
      ]);

      const pendingId = all[0]?.id ?? "";
      const dry = await inboxJson<{ dryRun: boolean; requeued: string[]; notParked: string[] }>([
        "outbox-requeue",
        parkedRow.id,
        pendingId,
        published.id,
        "--dry-run",
      ]);
      expect(dry).toEqual({ dryRun: true, requeued: [parkedRow.id], notParked: [pendingId, published.id] });
      expect(await count(db, "outbox", "needs_review_at is not null")).toBe(1);

      const real = await inboxJson<{ dryRun: boolean; requeued: string[]; notParked: string[] }>([
        "outbox-requeue",
        parkedRow.id,
        published.id,
      ]);
      expect(real).toEqual({ dryRun: false, requeued: [parkedRow.id], notParked: [published.id] });
      expect(
        await count(
          db,
          "outbox",
          `id = ${parkedRow.id} and needs_review_at is null and attempts = 0 and available_at <= now() and published_at is null`,
        ),
      ).toBe(1);
      expect(await count(db, "outbox", `id = ${published.id} and published_at is not null`)).toBe(1);

      const usage = await inbox(["outbox-requeue", "12abc", "9999999999999999999"]);
      expect(usage.code).toBe(2);
      expect(usage.stderr).toContain('Outbox ids are whole numbers ≥ 1 (bigint), got "12abc", "9999999999999999999"');
      expect((await inbox(["outbox-requeue"])).code).toBe(2);
    },
    WAITS,
  );

  test(
    "`inbox list --json` filters rows newest first and never prints a payload",
    async () => {
      const review = await parked("Quota at 100% of the plan");
      const waiting = await queued();
      const done = await processed();
      await backdateInbox(db, review.eventId, 3_600_000);

      const all = await inboxJson<EventSummary[]>(["list"]);
      expect(all.map((r) => r.eventId)).toEqual([done.eventId, waiting.eventId, review.eventId]);
      expect(all.map((r) => r.state)).toEqual(["processed", "unprocessed", "needs_review"]);
      for (const r of all) expect("payload" in r).toBe(false);
      expect(JSON.stringify(all)).not.toContain("cus_payload_marker");

      expect((await inboxJson<EventSummary[]>(["list", "--needs-review"])).map((r) => r.eventId)).toEqual([review.eventId]);
      expect((await inboxJson<EventSummary[]>(["list", "--unprocessed"])).map((r) => r.eventId)).toEqual([waiting.eventId]);
      expect((await inboxJson<EventSummary[]>(["list", "--error", "100%"])).map((r) => r.eventId)).toEqual([review.eventId]);
      expect((await inboxJson<EventSummary[]>(["list", "--since", "30m", "--limit", "1"])).map((r) => r.eventId)).toEqual([done.eventId]);
      expect(await inboxJson<EventSummary[]>(["list", "--type", "invoice.voided"])).toEqual([]);
    },
    WAITS,
  );

  test(
    "`inbox` exits 2 on a bad --limit, an unknown command, an unknown option or no command",
    async () => {
      for (const args of [
        ["list", "--limit", "abc"],
        ["list", "--limit", "0"],
        ["list", "--limit", "1.5"],
      ]) {
        const run = await inbox(args);
        expect(run.code).toBe(2);
        expect(run.stderr).toContain("--limit must be a whole number");
      }
      const unknown = await inbox(["frobnicate"]);
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toContain('Unknown command "frobnicate"');
      expect(unknown.stderr).toContain("Usage: bun run inbox");
      const option = await inbox(["list", "--bogus"]);
      expect(option.code).toBe(2);
      expect(option.stderr).toContain("Usage: bun run inbox");
      const none = await inbox([]);
      expect(none.code).toBe(2);
      // Options or arguments a command does not take are usage errors, never silently ignored:
      // `requeue evt_…` without --id would otherwise match every needs-review row.
      for (const [args, message] of [
        [["requeue", "evt_cli_x", "--dry-run"], 'requeue takes no arguments, got "evt_cli_x" (an event id goes in --id evt_cli_x)'],
        [["requeue", "--limit", "1"], "requeue does not take --limit"],
        [["resolve", "--unprocessed", "--id", "evt_cli_x", "--note", "n"], "resolve does not take --unprocessed"],
        [["show"], "show needs the event: --id evt_…"],
        [["replay", "evt_cli_x", "--id", "evt_cli_x"], 'replay takes the event id once: --id evt_cli_x or "evt_cli_x", not both'],
        [["show", "evt_cli_x", "evt_cli_y"], "show takes at most 1 argument(s), got 2"],
      ] as [string[], string][]) {
        const run = await inbox(args);
        expect({ args, code: run.code, stderr: run.stderr.split("\n")[0] }).toEqual({ args, code: 2, stderr: message });
      }
      for (const since of ["5", "yesterday", "2026-02-31"]) {
        const run = await inbox(["list", "--since", since]);
        expect(run.code).toBe(2);
        expect(run.stderr).toContain(`--since must be a duration (2h) or an ISO time, got "${since}"`);
      }
      const both = await inbox(["list", "--needs-review", "--unprocessed"]);
      expect(both.code).toBe(2);
      expect(both.stderr).toContain("Choose one of --needs-review and --unprocessed");
      const help = await inbox(["--help"]);
      expect(help.code).toBe(0);
      expect(help.stdout).toContain("Usage: bun run inbox");
    },
    WAITS,
  );

  test(
    "`inbox show --json` prints every endpoint's row of an event, with --payload its payload; an unknown id exits 1",
    async () => {
      const e = event();
      expect(await receiveSync(db, BILLING, verified(e.body))).toBe("processed");
      expect(await receiveAsync(db, PAYMENTS, verified(e.body))).toBe("queued");

      const rows = await inboxJson<EventSummary[]>(["show", e.eventId]);
      expect(rows.map((r) => [r.endpoint, r.state])).toEqual([
        ["billing", "processed"],
        ["payments", "unprocessed"],
      ]);
      expect(JSON.stringify(rows)).not.toContain("cus_payload_marker");
      const withPayload = await inboxJson<(EventSummary & { payload: unknown })[]>(["show", e.eventId, "--payload"]);
      expect(withPayload.map((r) => r.payload)).toEqual([JSON.parse(e.body), JSON.parse(e.body)]);
      // Without --json: a table of the rows, then each payload whole (the invoice inside data.object, not "[Object ...]").
      const table = await inbox(["show", e.eventId]);
      expect(table.code).toBe(0);
      expect(table.stdout).toMatch(/│ +│ event_id +│ endpoint +│ account +│ type +│ state +│/);
      expect(table.stdout).toMatch(/│ billing +│ platform +│ invoice\.paid +│ processed +│/);
      expect(table.stdout).toMatch(/│ payments +│ platform +│ invoice\.paid +│ unprocessed +│/);
      expect(table.stdout).not.toContain("cus_payload_marker");
      const text = await inbox(["show", e.eventId, "--payload"]);
      expect(text.stdout).toMatch(/│ +│ event_id +│/);
      expect(text.stdout).toContain("payload at endpoint billing:");
      expect(text.stdout).toContain('"customer": "cus_payload_marker"');
      expect(text.stdout).not.toContain("[Object");

      // A body jsonb could not hold (a \u0000 escape) is kept raw and printed with its line breaks.
      const kept = event("invoice.paid", { description: "a\u0000b" });
      const key = { provider: "stripe", endpoint: "billing", eventId: kept.eventId };
      const inserted = await insertInbox(db, [
        rawOnlyRow(key, verified(kept.body), "PostgresError: unsupported Unicode escape sequence", BACKOFF),
      ]);
      expect(inserted.size).toBe(1);
      const raw = await inbox(["show", kept.eventId, "--payload"]);
      expect(raw.stdout).toContain("payload at endpoint billing (raw body: jsonb could not hold it):");
      expect(raw.stdout).toContain(kept.body.split("\n").find((line) => line.includes('"description"'))!);
      expect(raw.stdout).toContain(`\n  "id": "${kept.eventId}",\n`);

      const unknown = await inbox(["show", "evt_cli_unknown"]);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toContain("No inbox row for evt_cli_unknown");
      expect((await inbox(["show"])).code).toBe(2);
    },
    WAITS,
  );

  test(
    "`inbox list`, `status` and `show` print control and bidirectional characters from events as escapes; --json keeps the exact strings",
    async () => {
      const type = "invoice.\u202epaid\x1b[31m";
      const e = event(type);
      expect(await receiveSync(db, BILLING, verified(e.body))).toBe("ignored"); // no handler for that type
      const review = await parked("bad \x1b]0;owned\x07 customer \u2066x\u2069");
      const raw = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/;
      for (const args of [["list"], ["status"], ["show", e.eventId], ["show", review.eventId, "--payload"]]) {
        const run = await inbox(args);
        expect({ args, code: run.code }).toEqual({ args, code: 0 });
        expect({ args, raw: raw.test(run.stdout) }).toEqual({ args, raw: false });
      }
      const listed = await inbox(["list"]);
      expect(listed.stdout).toContain("invoice.\\u202epaid\\x1b[31m");
      expect(listed.stdout).toContain("bad \\x1b]0;owned\\x07 customer \\u2066x\\u2069");

      const json = await inbox(["list", "--json"]);
      expect(raw.test(json.stdout)).toBe(false);
      const rows = JSON.parse(json.stdout) as EventSummary[];
      expect(rows.find((r) => r.eventId === e.eventId)?.eventType).toBe(type);
      expect(rows.find((r) => r.eventId === review.eventId)?.lastError).toBe("PermanentError: bad \x1b]0;owned\x07 customer \u2066x\u2069");
    },
    WAITS,
  );

  test(
    "`inbox requeue --dry-run --json` lists the needs-review rows and changes nothing; without --dry-run it requeues them",
    async () => {
      const review = await parked("Cannot apply invoice event: missing or invalid field(s) customer");
      const other = await parked("Cannot apply invoice event: missing or invalid field(s) currency", PAYMENTS);
      const waiting = await queued();

      const dry = await inboxJson<RequeueResult>(["requeue", "--endpoint", "billing", "--dry-run"]);
      expect(dry).toEqual({
        dryRun: true,
        rows: [
          {
            provider: "stripe",
            endpoint: "billing",
            eventId: review.eventId,
            eventType: "invoice.paid",
            attempts: 1,
            lastError: "PermanentError: Cannot apply invoice event: missing or invalid field(s) customer",
          },
        ],
      });
      expect(await stateOf(review.eventId)).toEqual({ state: "needs_review", attempts: 1, due: false });

      const real = await inboxJson<RequeueResult>(["requeue", "--error", "customer"]);
      expect(real.dryRun).toBe(false);
      expect(real.rows.map((r) => r.eventId)).toEqual([review.eventId]);
      expect(await stateOf(review.eventId)).toEqual({ state: "unprocessed", attempts: 0, due: true });
      expect(await stateOf(other.eventId, "payments")).toEqual({ state: "needs_review", attempts: 1, due: false });
      expect(await stateOf(waiting.eventId)).toMatchObject({ state: "unprocessed", attempts: 0 });
    },
    WAITS,
  );

  test(
    "`inbox replay --json` of a processed invoice.paid books nothing; an unprocessed or unknown event exits 1",
    async () => {
      const paid = await processed();
      const result = await inboxJson<ReplayResult>(["replay", paid.eventId]);
      expect(result).toEqual({ eventType: "invoice.paid", handled: true, inserted: 0, updated: 0, deleted: 0 });
      expect(await count(db, "ledger_entries")).toBe(1);
      expect(await count(db, "outbox")).toBe(1);

      const ignored = event("customer.created");
      expect(await receiveSync(db, BILLING, verified(ignored.body))).toBe("ignored");
      expect(await inboxJson<ReplayResult>(["replay", ignored.eventId])).toMatchObject({ eventType: "customer.created", handled: false });

      const waiting = await queued();
      const notYet = await inbox(["replay", waiting.eventId]);
      expect(notYet.code).toBe(1);
      expect(notYet.stderr).toContain(`Cannot replay ${waiting.eventId} at stripe/billing: it is not processed yet`);
      const unknown = await inbox(["replay", "evt_cli_unknown"]);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toContain("Cannot replay evt_cli_unknown: no inbox row");
      expect(await count(db, "ledger_entries")).toBe(1);
    },
    WAITS,
  );

  test(
    "every command names an event by --id (show and replay also by their one argument); --account narrows list, requeue and resolve to a connected account",
    async () => {
      const paid = await processed();
      expect(await inboxJson<EventSummary[]>(["show", "--id", paid.eventId])).toEqual(
        await inboxJson<EventSummary[]>(["show", paid.eventId]),
      );
      expect(await inboxJson<ReplayResult>(["replay", "--id", paid.eventId])).toMatchObject({ handled: true, inserted: 0 });
      // Three parked rows: two of acct_1A, one of the platform.
      const parked: string[] = [];
      for (const account of ["acct_1A", "acct_1A", ""]) {
        const e = event();
        const key = { provider: "stripe", endpoint: "billing", eventId: e.eventId };
        const failed = { error: "Error: boom", parked: true, backoff: BACKOFF };
        const row = { key, type: "invoice.paid", payload: e.body, rawBody: null, replaced: null, source: "webhook" as const };
        await insertInbox(db, [{ ...row, createdAtSec: null, account, livemode: false, settled: null, failed, traceparent: null }]);
        parked.push(e.eventId);
      }
      const [first, second, own] = parked as [string, string, string];
      const listed = await inboxJson<EventSummary[]>(["list", "--needs-review", "--account", "acct_1A"]);
      expect(listed.map((r) => [r.eventId, r.account]).sort()).toEqual([
        [first, "acct_1A"],
        [second, "acct_1A"],
      ]);
      expect((await inboxJson<EventSummary[]>(["list", "--needs-review", "--account", "platform"])).map((r) => r.eventId)).toEqual([own]);
      const table = await inbox(["list", "--needs-review"]);
      expect(table.stdout).toMatch(/│ billing +│ acct_1A +│ invoice\.paid +│ needs_review +│/);
      const requeued = await inboxJson<RequeueResult>(["requeue", "--account", "acct_1A"]);
      expect(requeued.rows.map((r) => r.eventId).sort()).toEqual([first, second].sort());
      expect((await inboxJson<EventSummary[]>(["list", "--needs-review"])).map((r) => r.eventId)).toEqual([own]);
      const resolved = await inboxJson<{ rows: { eventId: string }[] }>([
        "resolve",
        "--account",
        "acct_1A",
        "--type",
        "invoice.paid",
        "--note",
        "n",
      ]);
      expect(resolved.rows).toEqual([]); // acct_1A has no needs-review row left
      const closed = await inboxJson<{ rows: { eventId: string }[] }>([
        "resolve",
        "--account",
        "platform",
        "--type",
        "invoice.paid",
        "--note",
        "refunded by hand",
      ]);
      expect(closed.rows.map((r) => r.eventId)).toEqual([own]);
    },
    WAITS,
  );

  test(
    "`inbox replay` of an event received at two endpoints needs --endpoint (exit 2), then replays that one",
    async () => {
      const e = event();
      expect(await receiveSync(db, BILLING, verified(e.body))).toBe("processed");
      expect(await receiveSync(db, PAYMENTS, verified(e.body))).toBe("processed");
      const ambiguous = await inbox(["replay", e.eventId]);
      expect(ambiguous.code).toBe(2);
      expect(ambiguous.stderr).toContain("pass --endpoint");
      expect(await inboxJson<ReplayResult>(["replay", e.eventId, "--endpoint", "payments"])).toMatchObject({
        eventType: "invoice.paid",
        handled: true,
        inserted: 0,
      });
      expect(await count(db, "ledger_entries")).toBe(1);
    },
    WAITS,
  );

  test(
    "`inbox purge --older-than 1d` is refused with exit 1 naming Stripe's 31-day floor; --dry-run --json counts without deleting",
    async () => {
      const old = await processed();
      const recent = await processed();
      const waiting = await queued();
      await backdateInbox(db, [old.eventId, waiting.eventId], 40 * DAY_MS);
      await backdateInbox(db, recent.eventId, 5 * DAY_MS);

      const refused = await inbox(["purge", "--older-than", "1d"]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(
        "a key retention of 1 d is shorter than stripe's 31 d (it may send an event again for 30 d, plus a 1 d margin)",
      );
      expect(await count(db, "webhook_inbox")).toBe(3);

      // Keys: stripe's default 31 d takes the 40-day-old settled row. Payloads past 14 d: that row's; the
      // unsettled row's is kept (moved out of its week), the 5-day-old one is within the horizon.
      expect(await inboxJson<PurgeResult>(["purge", "--dry-run", "--payloads-older-than", "14d"])).toEqual({
        dryRun: true,
        deleted: 1,
        keyRetention: [{ provider: "stripe", olderThanMs: 31 * DAY_MS }],
        payloadsDropped: 1,
        outboxDeleted: 0,
        claimsDeleted: 0,
        backfillRequestsDeleted: 0,
        partitionsDropped: expect.any(Array),
        openPayloadsMoved: 1,
      });
      // A dry run changes nothing, so it needs no --force; it says the real run would.
      const dry = await inbox(["purge", "--older-than", "1d", "--dry-run"]);
      expect({ code: dry.code, stderr: dry.stderr }).toEqual({ code: 0, stderr: "" });
      expect(dry.stdout).toContain("Would delete 2 settled row(s) past their key retention (stripe 1 d)");
      expect(dry.stdout).toContain("The real run needs --force: a key retention of 1 d is shorter than stripe's 31 d");
      expect((await inboxJson<PurgeResult>(["purge", "--older-than", "1d", "--dry-run"])).forceRequired).toContain(
        "shorter than stripe's 31 d",
      );
      expect(await count(db, "webhook_inbox")).toBe(3);
      expect(await count(db, "webhook_inbox_payloads")).toBe(3);

      // The real run at the defaults (keys 31 d, payloads 31 d): the old key and its payload go; the
      // unsettled row keeps its payload, moved to the default partition when its week was dropped.
      expect(await inboxJson<PurgeResult>(["purge", "--batch", "1"])).toMatchObject({
        dryRun: false,
        deleted: 1,
        payloadsDropped: 1,
        openPayloadsMoved: 1,
      });
      expect(await count(db, "webhook_inbox", `event_id = '${old.eventId}'`)).toBe(0);
      expect(await count(db, "webhook_inbox")).toBe(2);
      expect(await inboxRowsOf(db, waiting.eventId)).toMatchObject([{ processed_at: null, payload_dropped: false }]);
      expect(await inboxRowsOf(db, recent.eventId)).toMatchObject([{ outcome: "processed", payload_dropped: false }]);

      const badDuration = await inbox(["purge", "--older-than", "30"]);
      expect(badDuration.code).toBe(2);
      expect(badDuration.stderr).toContain('Cannot read duration "30"');
      expect((await inbox(["purge", "--batch", "0"])).code).toBe(2);
    },
    WAITS,
  );

  test(
    "`inbox status` against an unreachable database exits 1 saying it cannot connect, not naming the schema",
    async () => {
      const run = await inbox(["status"], "postgres://postgres:postgres@127.0.0.1:1/postgres");
      expect(run.code).toBe(1);
      expect(run.stderr).toStartWith("Cannot connect to the database: connect ECONNREFUSED");
      expect(run.stderr).not.toContain("schema");
      expect(run.stderr).not.toContain("migrate");
    },
    WAITS,
  );

  test(
    "`inbox status` with a DATABASE_URL whose password holds an unencoded @ and # exits 1 at once and prints no part of the password",
    async () => {
      const password = "Kq7@Zx#W9v";
      const run = await inbox(["status"], `postgres://user:${password}@127.0.0.1:1/db`);
      expect({ code: run.code, signal: run.signal }).toEqual({ code: 1, signal: null });
      expect(run.stderr).toContain("percent-encode");
      const output = (run.stdout + run.stderr).toLowerCase();
      for (let i = 0; i + 2 <= password.length; i++) expect(output).not.toContain(password.slice(i, i + 2).toLowerCase());
      expect(output).not.toContain("enotfound");
    },
    WAITS,
  );

  test(
    "`inbox list --attempts N --text T` lists rows with at least N attempts whose payload contains T; a bad --attempts is a usage error",
    async () => {
      const plain = await processed();
      // The needle is in the payload as delivered (a payload row is never rewritten: sql/0027).
      const needle = event("invoice.paid", { customer: "cus_needle_cli" });
      expect(await receiveAsync(db, BILLING, verified(needle.body))).toBe("queued");
      await db`update webhook_inbox set attempts = 3 where event_id = ${needle.eventId}`;
      const ids = async (args: string[]) => (await inboxJson<EventSummary[]>(["list", ...args])).map((r) => r.eventId);
      expect(await ids(["--attempts", "3"])).toEqual([needle.eventId]);
      expect(await ids(["--attempts", "0"])).toEqual(expect.arrayContaining([plain.eventId, needle.eventId]));
      expect(await ids(["--text", "CUS_NEEDLE_CLI"])).toEqual([needle.eventId]);
      expect(await ids(["--text", "cus_needle_cli", "--attempts", "4"])).toEqual([]);
      const bad = await inbox(["list", "--attempts", "two"]);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain(`--attempts must be a whole number ≥ 0, got "two"`);
    },
    WAITS,
  );

  test(
    "`inbox status` on a schema behind the code exits 1 telling to run `bun run inbox migrate`, and `inbox migrate` fixes it",
    async () => {
      const behind = await freshDatabase({ migrated: false });
      try {
        const all = loadMigrations();
        expect(await migrate(behind.db, all.slice(0, 3))).toEqual(all.slice(0, 3).map((m) => m.name));

        const refused = await inbox(["status"], behind.url);
        expect(refused.code).toBe(1);
        expect(refused.stderr).toContain(`Database schema is at migration 3, this code needs ${all.length}`);
        expect(refused.stderr).toContain("bun run inbox migrate");

        expect(await inboxJson<{ applied: string[] }>(["migrate"], behind.url)).toEqual({ applied: all.slice(3).map((m) => m.name) });
        expect(await inboxJson<{ applied: string[] }>(["migrate"], behind.url)).toEqual({ applied: [] });
        expect(await inboxJson<InboxStatus>(["status"], behind.url)).toEqual({
          backlog: [],
          outbox: { pending: 0, oldestPendingAgeSec: 0, needsReview: 0 },
          backfill: [],
          backfillRequests: [],
          windowSec: 3_600,
          arrivals: [],
          processes: [],
          pauses: [],
        });
      } finally {
        await behind.drop();
      }
    },
    WAITS,
  );
});
