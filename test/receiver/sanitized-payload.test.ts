// A valid payment is never blocked by a character jsonb refuses in a field nobody reads: the event is
// stored from a copy with it replaced, its exact bytes kept in raw_body, and booked through the
// normal handler in every mode, and on requeue of rows parked before that was possible.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { jsonbCopy } from "../../src/providers/jsonb-text.ts";
import { purge } from "../../src/ops/purge.ts";
import { requeue } from "../../src/ops/requeue.ts";
import { workOff } from "../support/work.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import { count, eventBody, freshDatabase, invoice, SECRET, signedRequest } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

const URL_DEFAULT = "http://receiver.test/webhooks/stripe";

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
      const [row] = await db`
      select outcome, raw_body, payload_sanitized, needs_review_at, last_error,
             payload #>> '{data,object,description}' as description, payload #> '{data,object,metadata}' as metadata
        from webhook_inbox
    `;
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
      const [row] =
        await db`select event_type, raw_body, payload is not null as has_payload, needs_review_at is not null as parked, processed_at, last_error from webhook_inbox`;
      expect(row).toMatchObject({ event_type: "invoice.paid\ufffd", raw_body: body, has_payload: true, parked: true, processed_at: null });
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
    await db`update webhook_inbox set processed_at = now() - interval '8 days', event_created_at = now() - interval '8 days'`;
    expect(await purge(db, { olderThanMs: 31 * 86_400_000, payloadsOlderThanMs: 7 * 86_400_000 })).toMatchObject({
      dryRun: false,
      deleted: 0,
      payloadsDropped: 1,
    });
    const [row] = await db`select payload, raw_body, payload_dropped_at is not null as dropped from webhook_inbox`;
    expect(row).toEqual({ payload: null, raw_body: null, dropped: true });
  });

  test("`createApp()` still parks a number beyond numeric's range as needs-review with its raw body only", async () => {
    const body = eventBody("evt_huge_number", "invoice.paid", invoice({ status: "paid", amount_paid: 2000 })).replace(
      '"usd"',
      '"usd", "note": 1e131072',
    );
    expect(await deliver("sync", body)).toEqual({ status: 200, outcome: "needs_review", event_id: "evt_huge_number" } as never);
    const [row] = await db`select payload, raw_body, payload_sanitized, needs_review_at is not null as parked from webhook_inbox`;
    expect(row).toEqual({ payload: null, raw_body: body, payload_sanitized: null, parked: true });
  });
});

describe("rows parked before sanitized copies existed", () => {
  /** The row the old receiver wrote for an event jsonb refused: no payload, the exact body, parked. */
  async function parkedTheOldWay(eventId: string, type: string, body: string): Promise<void> {
    await db`
      insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, attempts, last_error, needs_review_at)
      values ('stripe', 'billing', ${eventId}, ${type}, null, ${body}, 1, 'Payload cannot be stored as jsonb (PostgresError 22P05: unsupported Unicode escape sequence); kept as raw_body', now())
    `;
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
  });

  test("`processClaim()` books a requeued payment whose row holds only its raw body, storing the sanitized copy as its payload", async () => {
    await parkedTheOldWay("evt_old_nul_1", "invoice.paid", paidWithNul("evt_old_nul_1", "in_old_1"));
    await parkedTheOldWay(
      "evt_old_nul_2",
      "invoice.created",
      eventBody("evt_old_nul_2", "invoice.created", invoice({ id: "in_old_2", description: "\u0000" })),
    );
    expect((await requeue(db, {}, false)).rows).toHaveLength(2);
    const results = await work();
    expect(results.map((r) => [r.claim.eventId, r.outcome]).sort()).toEqual([
      ["evt_old_nul_1", "processed"],
      ["evt_old_nul_2", "processed"],
    ]);
    const rows =
      await db`select event_id, payload_sanitized, payload #>> '{data,object,description}' as description, raw_body is not null as raw from webhook_inbox order by event_id`;
    expect(rows).toEqual([
      { event_id: "evt_old_nul_1", payload_sanitized: "\\u0000 ×2, lone surrogate ×1 → U+FFFD", description: "a\ufffdb", raw: true },
      { event_id: "evt_old_nul_2", payload_sanitized: "\\u0000 ×1 → U+FFFD", description: "\ufffd", raw: true },
    ] as never);
    expect(await db`select invoice_id, amount from ledger_entries`).toEqual([{ invoice_id: "in_old_1", amount: "2000" }] as never);
    expect(await count(db, "invoices")).toBe(2);
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
    expect(await count(db, "webhook_inbox", "payload is not null and payload_sanitized is not null and outcome = 'processed'")).toBe(1);
  });

  test("`processClaim()` parks a requeued raw-body row that no copy can fix, saying so", async () => {
    const body = eventBody("evt_old_huge", "invoice.created", invoice()).replace('"usd"', '"usd", "note": 1e131072');
    await parkedTheOldWay("evt_old_huge", "invoice.created", body);
    await requeue(db, {}, false);
    expect((await work()).map((r) => r.outcome)).toEqual(["needs_review"]);
    const [row] = await db`select last_error, raw_body from webhook_inbox`;
    expect(String(row?.last_error)).toContain("no jsonb payload");
    expect(row?.raw_body).toBe(body);
  });
});
