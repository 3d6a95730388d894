// A valid payment is never blocked by a character jsonb refuses in a field nobody reads: the event is
// stored from a copy with it replaced, its exact bytes kept in raw_body, and booked through the
// normal handler in every mode, and on requeue of rows parked before that was possible.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { jsonbCopy } from "../../src/providers/jsonb-text.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { purge } from "../../src/ops/purge.ts";
import { replayEvent } from "../../src/ops/replay.ts";
import { requeue } from "../../src/ops/requeue.ts";
import { workOff } from "../support/work.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import {
  backdateInbox,
  count,
  eventBody,
  freshDatabase,
  inboxRowFor,
  inboxRowsOf,
  invoice,
  SECRET,
  signedRequest,
} from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices`;
});

const URL_DEFAULT = "http://receiver.test/webhooks/stripe";
const DAY_MS = 86_400_000;

/** The one inbox row of `eventId` with its payload row's columns (sql/0027), and the payload's description and metadata. */
async function onlyRow(eventId: string): Promise<Record<string, unknown>> {
  const rows = await inboxRowsOf(db, eventId);
  expect(rows).toHaveLength(1);
  const row = rows[0]!;
  const object = (row.payload as { data?: { object?: Record<string, unknown> } } | null)?.data?.object;
  return { ...row, description: object?.description, metadata: object?.metadata };
}

function appFor(mode: Mode) {
  return createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]), log: () => {} });
}

async function deliver(mode: Mode, body: string): Promise<{ status: number; outcome?: string; error?: string }> {
  const res = await appFor(mode).fetch(await signedRequest(URL_DEFAULT, body));
  return { status: res.status, ...((await res.json()) as { outcome?: string; error?: string }) };
}

/** Claims every due row and processes each, as `bun run worker` would. */
function work(handlers: HandlerTable = billingHandlers) {
  return workOff(db, handlers);
}

/** A paid invoice whose description holds U+0000 and a metadata key holding U+0000 and a lone surrogate. */
function paidWithNul(eventId: string, invoiceId: string): string {
  const body = eventBody(
    eventId,
    "invoice.paid",
    invoice({ id: invoiceId, status: "paid", amount_paid: 2000, description: "a\u0000b", metadata: { "k\u0000": "x\ud800y" } }),
  );
  expect(body).toContain("\\u0000");
  expect(body).toContain("\\ud800");
  return body;
}

describe("jsonbCopy()", () => {
  test("`jsonbCopy()` replaces \\u0000 in strings and keys and lone surrogate escapes by \\ufffd, and nothing else", () => {
    const text = String.raw`{"a\u0000":"x\u0000y","p":"\ud83d\ude00","h":"\ud800","l":"\udc00z","e":"\\u0000","n":12345678901234567890123,"u":"\u0041"}`;
    const copy = jsonbCopy(text);
    expect(copy?.json).toBe(
      String.raw`{"a\ufffd":"x\ufffdy","p":"\ud83d\ude00","h":"\ufffd","l":"\ufffdz","e":"\\u0000","n":12345678901234567890123,"u":"\u0041"}`,
    );
    expect(copy?.replaced).toBe("\\u0000 ×2, lone surrogate ×2 → U+FFFD");
  });

  test("`jsonbCopy()` returns undefined for JSON jsonb takes as it is", () => {
    expect(jsonbCopy('{"a":"b"}')).toBeUndefined();
    expect(jsonbCopy(String.raw`{"a":"\\u0000 \u00e9 \ud83d\ude00","n":1e400}`)).toBeUndefined();
  });
});

describe("a payment holding characters jsonb refuses", () => {
  test.each(["sync", "hybrid", "async"] as const)(
    "`createApp()` books a signed invoice.paid whose description holds \\u0000, keeping its exact bytes in raw_body (%s)",
    async (mode) => {
      const body = paidWithNul(`evt_nul_paid_${mode}`, `in_nul_${mode}`);
      const first = await deliver(mode, body);
      expect(first).toEqual({ status: 200, outcome: mode === "async" ? "queued" : "processed", event_id: `evt_nul_paid_${mode}` } as never);
      if (mode === "async") expect((await work()).map((r) => r.outcome)).toEqual(["processed"]);
      expect((await deliver(mode, body)).outcome).toBe("duplicate");
      expect(await count(db, "webhook_inbox")).toBe(1);
      const row = await onlyRow(`evt_nul_paid_${mode}`);
      expect(row).toMatchObject({
        outcome: "processed",
        raw_body: body,
        needs_review_at: null,
        last_error: null,
        description: "a\ufffdb",
        metadata: { "k\ufffd": "x\ufffdy" },
      });
      expect(row?.payload_sanitized).toBe("\\u0000 ×2, lone surrogate ×1 → U+FFFD");
      expect(await db`select invoice_id, amount from ledger_entries`).toEqual([{ invoice_id: `in_nul_${mode}`, amount: "2000" }] as never);
      expect(await count(db, "outbox")).toBe(1);
    },
  );

  test.each(["sync", "hybrid", "async"] as const)(
    "`createApp()` answers 200 needs_review to an event type holding \\u0000 and keeps it with its raw body (%s)",
    async (mode) => {
      const body = eventBody(`evt_nul_type_${mode}`, "invoice.paid\u0000", invoice({ status: "paid", amount_paid: 2000 }));
      expect(await deliver(mode, body)).toEqual({ status: 200, outcome: "needs_review", event_id: `evt_nul_type_${mode}` } as never);
      expect((await deliver(mode, body)).outcome).toBe("duplicate");
      expect(await count(db, "webhook_inbox")).toBe(1);
      const row = await onlyRow(`evt_nul_type_${mode}`);
      expect(row).toMatchObject({ event_type: "invoice.paid\ufffd", raw_body: body, payload: expect.any(Object), processed_at: null });
      expect(row.needs_review_at).not.toBeNull();
      expect(String(row?.last_error)).toContain("Event type holds characters PostgreSQL cannot store");
      expect(await count(db, "ledger_entries")).toBe(0);
    },
  );

  test("`processClaim()` parks a requeued event whose type held \\u0000 again, with a clear error, never settling it as ignored", async () => {
    const body = eventBody(
      "evt_nul_type_requeued",
      "invoice.paid\u0000",
      invoice({ id: "in_nul_type_requeued", status: "paid", amount_paid: 2000 }),
    );
    expect((await deliver("sync", body)).outcome).toBe("needs_review");
    expect((await requeue(db, {}, false)).rows).toHaveLength(1);
    const results = await work();
    expect(results.map((r) => [r.claim.eventId, r.outcome])).toEqual([["evt_nul_type_requeued", "needs_review"]]);
    const [row] = await db`select event_type, outcome, processed_at, needs_review_at is not null as parked, last_error from webhook_inbox`;
    expect(row).toMatchObject({ event_type: "invoice.paid\ufffd", outcome: null, processed_at: null, parked: true });
    expect(String(row?.last_error)).toContain("Event type holds characters PostgreSQL cannot store");
    expect(await count(db, "ledger_entries")).toBe(0);
  });

  test("`purge()` drops the raw body of a sanitized payload together with the payload", async () => {
    expect((await deliver("sync", paidWithNul("evt_nul_purged", "in_nul_purged"))).outcome).toBe("processed");
    expect(await onlyRow("evt_nul_purged")).toMatchObject({
      raw_body: expect.any(String),
      payload: expect.any(Object),
      payload_dropped: false,
    });
    // Received 20 days ago: its week's partition (or the default one) is entirely past a 7-day payload horizon.
    await backdateInbox(db, "evt_nul_purged", 20 * DAY_MS);
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 7 * DAY_MS })).toMatchObject({
      dryRun: false,
      deleted: 0,
      payloadsDropped: 1,
      openPayloadsMoved: 0,
    });
    // The key stays (31 days); the payload row, raw body and sanitizing note with it, is gone.
    expect(await onlyRow("evt_nul_purged")).toMatchObject({
      outcome: "processed",
      payload: null,
      raw_body: null,
      payload_sanitized: null,
      payload_dropped: true,
    });
    expect(await count(db, "webhook_inbox_payloads")).toBe(0);
  });

  test("`createApp()` still parks a number beyond numeric's range as needs-review with its raw body only", async () => {
    const body = eventBody("evt_huge_number", "invoice.paid", invoice({ status: "paid", amount_paid: 2000 })).replace(
      '"usd"',
      '"usd", "note": 1e131072',
    );
    expect(await deliver("sync", body)).toEqual({ status: 200, outcome: "needs_review", event_id: "evt_huge_number" } as never);
    const row = await onlyRow("evt_huge_number");
    expect(row).toMatchObject({ payload: null, raw_body: body, payload_sanitized: null, payload_dropped: false, processed_at: null });
    expect(row.needs_review_at).not.toBeNull();
  });
});

describe("rows parked before sanitized copies existed", () => {
  /**
   * The row the old receiver wrote for an event jsonb refused (kept so by sql/0027's copy): a state row
   * parked after one attempt, and a payload row with no payload, the exact body and no sanitizing note.
   */
  async function parkedTheOldWay(eventId: string, type: string, body: string): Promise<void> {
    const error = "Payload cannot be stored as jsonb (PostgresError 22P05: unsupported Unicode escape sequence); kept as raw_body";
    const inserted = await insertInbox(db, [
      inboxRowFor(
        { provider: "stripe", endpoint: "billing", eventId },
        { type, payload: null, rawBody: body, failed: { error, parked: true, backoff: { baseMs: 60_000, capMs: 600_000 } } },
      ),
    ]);
    expect(inserted.size).toBe(1);
  }

  /** The payload row of `eventId` as it is stored (never rewritten: sql/0027). */
  async function payloadRowOf(eventId: string) {
    return db`select payload, raw_body, payload_sanitized from webhook_inbox_payloads where event_id = ${eventId}`;
  }

  test("`processClaim()` parks a requeued raw-body-only row whose type held \\u0000, never settling it as ignored", async () => {
    const body = eventBody("evt_old_nul_type", "invoice.paid\u0000", invoice({ id: "in_old_nul_type", status: "paid", amount_paid: 2000 }));
    await parkedTheOldWay("evt_old_nul_type", "invoice.paid\ufffd", body);
    expect((await requeue(db, {}, false)).rows).toHaveLength(1);
    const results = await work();
    expect(results.map((r) => [r.claim.eventId, r.outcome])).toEqual([["evt_old_nul_type", "needs_review"]]);
    const [row] = await db`select outcome, processed_at, needs_review_at is not null as parked, last_error from webhook_inbox`;
    expect(row).toMatchObject({ outcome: null, processed_at: null, parked: true });
    expect(String(row?.last_error)).toContain("Event type holds characters PostgreSQL cannot store");
    expect(await payloadRowOf("evt_old_nul_type")).toEqual([{ payload: null, raw_body: body, payload_sanitized: null }] as never);
  });

  test("`processClaim()` books a requeued payment whose row holds only its raw body from a copy made at the read, leaving its payload row as it was; a second claim and a replay work from the raw body again", async () => {
    const paid = paidWithNul("evt_old_nul_1", "in_old_1");
    const created = eventBody("evt_old_nul_2", "invoice.created", invoice({ id: "in_old_2", description: "\u0000" }));
    await parkedTheOldWay("evt_old_nul_1", "invoice.paid", paid);
    await parkedTheOldWay("evt_old_nul_2", "invoice.created", created);
    expect((await requeue(db, {}, false)).rows).toHaveLength(2);

    // A first claim that fails after reading the copy (a transient error) stores nothing back.
    const seen: unknown[] = [];
    const flaky: HandlerTable = {
      "invoice.paid": async (_tx, object) => {
        seen.push(object.description);
        throw new Error("Flaky handler: try again");
      },
      "invoice.created": async (_tx, object) => {
        seen.push(object.description);
        throw new Error("Flaky handler: try again");
      },
    };
    expect((await work(flaky)).map((r) => [r.claim.eventId, r.outcome, r.claim.payload ?? null]).sort()).toEqual([
      ["evt_old_nul_1", "failed", null],
      ["evt_old_nul_2", "failed", null],
    ]);
    expect(seen.sort()).toEqual(["a\ufffdb", "\ufffd"]);
    expect(await payloadRowOf("evt_old_nul_1")).toEqual([{ payload: null, raw_body: paid, payload_sanitized: null }] as never);

    // Due again: the second claim again gets only the raw body, and books from a fresh copy.
    await db`update webhook_inbox set available_at = now()`;
    const results = await work();
    expect(results.map((r) => [r.claim.eventId, r.outcome, r.claim.payload ?? null, r.claim.rawBody]).sort()).toEqual([
      ["evt_old_nul_1", "processed", null, paid],
      ["evt_old_nul_2", "processed", null, created],
    ]);
    expect(await db`select invoice_id, amount from ledger_entries`).toEqual([{ invoice_id: "in_old_1", amount: "2000" }] as never);
    expect(await db`select id, status from invoices order by id`).toEqual([
      { id: "in_old_1", status: "paid" },
      { id: "in_old_2", status: "draft" },
    ] as never);
    expect(await count(db, "outbox")).toBe(1);
    // The payload rows are insert-only: still no payload, the exact bytes, no sanitizing note.
    expect(await payloadRowOf("evt_old_nul_1")).toEqual([{ payload: null, raw_body: paid, payload_sanitized: null }] as never);
    expect(await payloadRowOf("evt_old_nul_2")).toEqual([{ payload: null, raw_body: created, payload_sanitized: null }] as never);
    expect(await count(db, "webhook_inbox_payloads")).toBe(2);

    // A replay reads the raw body again and books nothing more (the handler is idempotent).
    const replayed = await replayEvent(db, { provider: "stripe", endpoint: "billing", eventId: "evt_old_nul_1" }, billingHandlers);
    expect(replayed).toMatchObject({ eventType: "invoice.paid", handled: true, inserted: 0 });
    expect(await count(db, "ledger_entries")).toBe(1);
    expect(await count(db, "outbox")).toBe(1);
    expect(await payloadRowOf("evt_old_nul_1")).toEqual([{ payload: null, raw_body: paid, payload_sanitized: null }] as never);
  });

  test("`processClaim()` applies a requeued raw-body row through a plain (non-statement) handler too", async () => {
    const seen: unknown[] = [];
    const plain: HandlerTable = { "invoice.created": async (_tx, object) => void seen.push(object.description) };
    await parkedTheOldWay(
      "evt_old_plain",
      "invoice.created",
      eventBody("evt_old_plain", "invoice.created", invoice({ description: "a\u0000" })),
    );
    await requeue(db, {}, false);
    expect((await work(plain)).map((r) => r.outcome)).toEqual(["processed"]);
    expect(seen).toEqual(["a\ufffd"]);
    expect(await count(db, "webhook_inbox", "outcome = 'processed'")).toBe(1);
    expect(await count(db, "webhook_inbox_payloads", "payload is null and raw_body is not null and payload_sanitized is null")).toBe(1);
  });

  test("`processClaim()` parks a requeued raw-body row that no copy can fix, saying so", async () => {
    const body = eventBody("evt_old_huge", "invoice.created", invoice()).replace('"usd"', '"usd", "note": 1e131072');
    await parkedTheOldWay("evt_old_huge", "invoice.created", body);
    await requeue(db, {}, false);
    expect((await work()).map((r) => r.outcome)).toEqual(["needs_review"]);
    const row = await onlyRow("evt_old_huge");
    expect(String(row.last_error)).toContain("no jsonb payload");
    expect(row).toMatchObject({ raw_body: body, payload: null, processed_at: null });
    expect(row.needs_review_at).not.toBeNull();
  });
});
