// resolveReviewed() (`bun run inbox resolve`) against real PostgreSQL: an operator closes a
// needs-review row settled by hand. Only parked rows matching the filter change; the note is kept;
// the row leaves the backlog; a redelivery stays a duplicate; retention then treats it as settled.
import { afterAll, beforeEach, expect, test } from "bun:test";
import { join } from "node:path";
import { PermanentError } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { purge } from "../../src/ops/purge.ts";
import { replayEvent } from "../../src/ops/replay.ts";
import { resolveReviewed } from "../../src/ops/resolve.ts";
import { readBacklog } from "../../src/inbox/backlog.ts";
import { receiveAsync, receiveSync, recordFallback, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { insertInbox, rawOnlyRow } from "../../src/inbox/inbox.ts";
import { backdateInbox, count, eventBody, freshDatabase, inboxRowsOf, invoice, verified } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices`;
});

const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
const NOTE = "Refunded in the Stripe dashboard after reconciliation (ticket PAY-123)";

function paid(n: number) {
  const eventId = `evt_resolve_${n}`;
  return { eventId, body: eventBody(eventId, "invoice.paid", invoice({ id: `in_resolve_${n}`, amount_paid: 2000, status: "paid" })) };
}

async function parked(n: number, message: string) {
  const e = paid(n);
  expect(await recordFallback(db, BILLING, verified(e.body), new PermanentError(message), BACKOFF)).toBe("needs_review");
  return e;
}

async function stateOf(eventId: string) {
  const [row] = await db<{ state: string; settled: boolean; parked: boolean; last_error: string | null; resolution_note: string | null }[]>`
    select state, processed_at is not null as settled, needs_review_at is not null as parked, last_error, resolution_note
      from webhook_inbox_state
     where event_id = ${eventId}
  `;
  return row;
}

test("`resolveReviewed()` closes only the matching needs-review row, keeps why it was parked (last_error) and the note, and a redelivery stays a duplicate", async () => {
  const refused = await parked(1, "Cannot book a payment for void invoice in_resolve_1");
  const other = await parked(2, "Cannot apply invoice event: missing or invalid field(s) customer");
  const waiting = paid(3);
  expect(await receiveAsync(db, BILLING, verified(waiting.body))).toBe("queued");

  const dry = await resolveReviewed(db, { eventId: refused.eventId }, NOTE, true);
  expect(dry.rows.map((r) => r.eventId)).toEqual([refused.eventId]);
  expect((await stateOf(refused.eventId))?.state).toBe("needs_review");

  // A type filter matches all three rows; only the parked ones can be resolved, and only those matching the error.
  const result = await resolveReviewed(db, { eventType: "invoice.paid", error: "void invoice" }, NOTE, false);
  expect(result).toEqual({
    dryRun: false,
    rows: [
      {
        provider: "stripe",
        endpoint: "billing",
        eventId: refused.eventId,
        eventType: "invoice.paid",
        lastError: "PermanentError: Cannot book a payment for void invoice in_resolve_1",
      },
    ],
  });
  expect(await stateOf(refused.eventId)).toEqual({
    state: "resolved",
    settled: true,
    parked: false,
    last_error: "PermanentError: Cannot book a payment for void invoice in_resolve_1",
    resolution_note: NOTE,
  });
  expect((await stateOf(other.eventId))?.state).toBe("needs_review");
  expect((await stateOf(waiting.eventId))?.state).toBe("unprocessed");
  expect(await readBacklog(db)).toEqual([
    { provider: "stripe", endpoint: "billing", unprocessed: 1, oldestUnprocessedAgeSec: expect.any(Number), needsReview: 1 },
  ]);

  expect(await receiveSync(db, BILLING, verified(refused.body))).toBe("duplicate");
  expect(await count(db, "ledger_entries")).toBe(0); // no handler ran
  // Replaying it would book what the operator decided not to book: refused, nothing written.
  await expect(replayEvent(db, { provider: "stripe", endpoint: "billing", eventId: refused.eventId }, billingHandlers)).rejects.toThrow(
    `an operator resolved it by hand ("${NOTE}")`,
  );
  expect(await count(db, "ledger_entries")).toBe(0);
  expect(await count(db, "invoices")).toBe(0);
  // Resolving again finds nothing: it is no longer parked.
  expect((await resolveReviewed(db, { eventId: refused.eventId }, NOTE, false)).rows).toEqual([]);
});

test("`resolveReviewed()` refuses a blank note, and resolved rows are purged like settled ones", async () => {
  const e = await parked(4, "Cannot apply invoice event: missing or invalid field(s) customer");
  await expect(resolveReviewed(db, { eventId: e.eventId }, "  ", false)).rejects.toThrow("Cannot resolve without a note");
  expect((await resolveReviewed(db, { eventId: e.eventId }, NOTE, false)).rows).toHaveLength(1);
  await backdateInbox(db, e.eventId, 40 * 86_400_000);
  expect(await purge(db, { olderThanMs: 31 * 86_400_000 })).toMatchObject({ deleted: 1, payloadsDropped: 1 });
  expect(await count(db, "webhook_inbox")).toBe(0);
  expect(await count(db, "webhook_inbox_payloads")).toBe(0);
});

test("`resolveReviewed()` closes an event kept only as its raw body (jsonb could not hold it)", async () => {
  // Kept as the receiver keeps it (inbox.ts rawOnlyRow): parked at once, its payload row holding only the raw body.
  const raw = '{"id":"evt_resolve_raw","object":"event","type":"invoice.paid","data":{"object":{"description":"a\\u0000b"}}}';
  const key = { provider: "stripe", endpoint: "billing", eventId: "evt_resolve_raw" };
  expect(
    (await insertInbox(db, [rawOnlyRow(key, verified(raw), "PostgresError: unsupported Unicode escape sequence", BACKOFF)])).size,
  ).toBe(1);
  expect(await stateOf("evt_resolve_raw")).toMatchObject({ state: "needs_review" });
  expect((await resolveReviewed(db, { eventId: "evt_resolve_raw" }, NOTE, false)).rows).toHaveLength(1);
  expect(await stateOf("evt_resolve_raw")).toMatchObject({ state: "resolved", resolution_note: NOTE });
  // Resolving changes the state row only: the raw body is still there, as it arrived.
  expect(await inboxRowsOf(db, "evt_resolve_raw")).toMatchObject([{ payload: null, raw_body: raw, payload_dropped: false }]);
});

test("`inbox resolve` needs a filter and a note (exit 2), then resolves with --json", async () => {
  const e = await parked(5, "Cannot apply invoice event: missing or invalid field(s) customer");
  const run = async (args: string[]) => {
    const proc = Bun.spawn([process.execPath, "src/bin/inbox.ts", ...args], {
      cwd: join(import.meta.dir, "..", ".."),
      env: { ...process.env, DATABASE_URL: fresh.url },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 20_000,
    });
    const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code: proc.exitCode, stdout, stderr };
  };
  const noFilter = await run(["resolve", "--note", NOTE]);
  expect(noFilter.code).toBe(2);
  expect(noFilter.stderr).toContain("resolve needs --id, --type or --error");
  const noNote = await run(["resolve", "--id", e.eventId]);
  expect(noNote.code).toBe(2);
  expect(noNote.stderr).toContain("resolve needs --note TEXT");
  const ok = await run(["resolve", "--id", e.eventId, "--note", NOTE, "--json"]);
  expect(ok.code).toBe(0);
  expect((JSON.parse(ok.stdout) as { rows: { eventId: string }[] }).rows.map((r) => r.eventId)).toEqual([e.eventId]);
  expect((await stateOf(e.eventId))?.state).toBe("resolved");
}, 60_000);
