// The outbox dispatcher through real HTTP: httpSink() POSTs to a Bun.serve receiver on 127.0.0.1 that
// verifies the Standard Webhooks signature with the same `standardwebhooks` library and deduplicates by
// message id, as a downstream consumer should.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { connect } from "../../src/db/db.ts";
import type { OutboxMessage } from "../../src/outbox/claim.ts";
import { deliverClaimed } from "../../src/outbox/deliver-claimed.ts";
import { runDispatcher } from "../../src/outbox/dispatcher.ts";
import { httpSink, SinkRejectedError, webhookBody } from "../../src/outbox/http-sink.ts";
import { count, freshDatabase } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate outbox`;
});

/** Standard Webhooks secrets: whsec_ + base64 of random key bytes (never real ones). */
function newSecret(): string {
  return `whsec_${btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(24))))}`;
}
const SECRET = newSecret();
const WAITS = 30_000;

interface Received {
  messageId: string;
  body: string;
  verified: boolean;
}

/**
 * A downstream receiver: verifies each request's signature (400 if it does not match), records it,
 * processes each message id once, and answers the first `failFirst` requests of every message id
 * with 500 after processing (an answer lost on the way back: the sender must retry, the receiver
 * must not process again).
 */
function startReceiver(options: { secret?: string; failFirst?: number; status?: number; hang?: boolean } = {}) {
  const verifier = new Webhook(options.secret ?? SECRET);
  const requests: Received[] = [];
  const processed = new Map<string, unknown>();
  const seenPerId = new Map<string, number>();
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const body = await request.text();
      const messageId = request.headers.get("webhook-id") ?? "";
      if (options.hang) return new Promise<Response>(() => {});
      let payload: unknown;
      try {
        payload = verifier.verify(body, Object.fromEntries(request.headers));
      } catch {
        requests.push({ messageId, body, verified: false });
        return new Response("bad signature", { status: 400 });
      }
      requests.push({ messageId, body, verified: true });
      if (options.status) return new Response(null, { status: options.status, headers: { location: "http://127.0.0.1:1/elsewhere" } });
      if (!processed.has(messageId)) processed.set(messageId, payload); // dedup by message id
      const seen = (seenPerId.get(messageId) ?? 0) + 1;
      seenPerId.set(messageId, seen);
      return new Response(null, { status: seen <= (options.failFirst ?? 0) ? 500 : 204 });
    },
  });
  return { url: `http://127.0.0.1:${server.port}/hooks/outbox`, requests, processed, stop: () => server.stop(true) };
}

async function insertRows(n: number): Promise<string[]> {
  const rows = await db<{ id: string }[]>`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload)
    select 'Invoice', 'in_http_' || n, 'InvoicePaymentBooked',
           jsonb_build_object('invoice_id', 'in_http_' || n, 'amount', 2000, 'currency', 'usd')
      from generate_series(1, ${n}) n
    returning id::text as id
  `;
  return rows.map((r) => r.id).sort((a, b) => Number(a) - Number(b));
}

/** The `webhook-id` each row is sent with: its message id, derived from the business change (sql/0024). */
async function messageIds(ids: string[]): Promise<Map<string, string>> {
  const rows = await db<{ id: string; message_id: string }[]>`select id::text as id, message_id from outbox where id = any(${ids}::bigint[])`;
  return new Map(rows.map((r) => [r.id, r.message_id]));
}

/** A message as a claim would return it, for calling the sink directly. */
function message(overrides: Partial<OutboxMessage> = {}): OutboxMessage {
  return {
    id: "42",
    messageId: "msg_outbox_42",
    aggregateType: "Invoice",
    aggregateId: "in_42",
    eventType: "InvoicePaymentBooked",
    payload: { invoice_id: "in_42", amount: 2000 },
    createdAt: new Date("2026-01-02T03:04:05.000Z"),
    attempt: 1,
    token: 7n,
    ...overrides,
  };
}

describe("httpSink()", () => {
  test(
    "`httpSink()` through `runDispatcher()`: signed, verified, one message id per row on every retry, processed once by a deduplicating receiver",
    async () => {
      const receiver = startReceiver({ failFirst: 1 });
      const ids = await insertRows(10);
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      const lines: Record<string, unknown>[] = [];
      const dispatcher = runDispatcher({
        db: pool,
        send: httpSink({ url: receiver.url, secret: SECRET }),
        signal: controller.signal,
        pollMs: 20,
        backoff: { baseMs: 20, capMs: 50 },
        log: (l) => lines.push(l),
      });
      try {
        await waitUntil("10 published rows", async () => (await count(db, "outbox", "published_at is not null")) === 10, {
          timeoutMs: 15_000,
        });
      } finally {
        controller.abort();
        await dispatcher;
        await pool.end({ timeout: 5 });
        receiver.stop();
      }
      expect(receiver.requests.length).toBe(20); // each answered 500 once, then retried
      expect(receiver.requests.every((r) => r.verified)).toBe(true);
      const sent = await messageIds(ids);
      expect([...receiver.processed.keys()].sort()).toEqual(ids.map((id) => sent.get(id)).sort() as string[]);
      expect(new Set(sent.values()).size).toBe(10); // ten business changes, ten message ids
      for (const id of ids) {
        const attempts = receiver.requests.filter((r) => r.messageId === sent.get(id));
        expect(attempts.length).toBe(2);
        expect(attempts[0]?.body).toBe(attempts[1]?.body as string); // the same bytes on every retry
      }
      const first = receiver.processed.get(sent.get(ids[0]!)!) as Record<string, unknown>;
      expect(first).toEqual({
        type: "InvoicePaymentBooked",
        timestamp: expect.any(String),
        data: { invoice_id: "in_http_1", amount: 2000, currency: "usd" },
      });
      expect(lines.filter((l) => l.outcome === "failed").map((l) => l.error)).toEqual(
        Array(10).fill("SinkRejectedError: Sink answered HTTP 500"),
      );
      expect(lines.filter((l) => l.outcome === "published").length).toBe(10);
    },
    WAITS,
  );

  test("`httpSink()` signs so that only the receiver's own secret verifies it", async () => {
    const receiver = startReceiver({ secret: newSecret() });
    try {
      const send = httpSink({ url: receiver.url, secret: SECRET });
      const error = await send(message(), { signal: new AbortController().signal }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SinkRejectedError);
      expect((error as SinkRejectedError).status).toBe(400);
      expect(receiver.requests).toEqual([{ messageId: "msg_outbox_42", body: webhookBody(message()), verified: false }]);
    } finally {
      receiver.stop();
    }
  });

  test("`httpSink()` treats a redirect as a failure and does not follow it", async () => {
    const receiver = startReceiver({ status: 307 });
    try {
      const send = httpSink({ url: receiver.url, secret: SECRET });
      await expect(send(message(), { signal: new AbortController().signal })).rejects.toThrow("Sink answered HTTP 307");
      expect(receiver.requests.length).toBe(1);
    } finally {
      receiver.stop();
    }
  });

  test("`deliverClaimed()` with `httpSink()` records a DeliveryTimeoutError for a receiver that never answers", async () => {
    const receiver = startReceiver({ hang: true });
    try {
      const [id] = await insertRows(1);
      const [claimed] = await db<{ claim_token: string }[]>`
        update outbox set attempts = 1, claim_token = nextval('outbox_claim_token_seq'), available_at = now() + interval '1 min'
         where id = ${id as string}::bigint returning claim_token::text as claim_token
      `;
      const result = await deliverClaimed(
        db,
        message({ id: id as string, messageId: (await messageIds([id as string])).get(id as string)!, token: BigInt(claimed?.claim_token ?? 0) }),
        {
          send: httpSink({ url: receiver.url, secret: SECRET }),
          timeoutMs: 200,
          maxAttempts: 10,
          backoff: { baseMs: 60_000, capMs: 60_000 },
        },
      );
      expect(result).toEqual({ outcome: "failed", error: "DeliveryTimeoutError: Sink did not answer within 200 ms" });
      expect(await count(db, "outbox", "published_at is null and last_error like 'DeliveryTimeoutError%'")).toBe(1);
    } finally {
      receiver.stop();
    }
  });

  test("`httpSink()` refuses an unusable URL or secret without echoing the secret", () => {
    const bad = "whsec_!!not-base64!!";
    expect(() => httpSink({ url: "ftp://127.0.0.1/x", secret: SECRET })).toThrow("protocol must be http or https");
    expect(() => httpSink({ url: "not a url", secret: SECRET })).toThrow("Cannot use sink URL: it is not an absolute URL");
    expect(() => httpSink({ url: "http://127.0.0.1/x", secret: "s3cr3t" })).toThrow("must start with whsec_");
    let message = "";
    try {
      httpSink({ url: "http://127.0.0.1/x", secret: bad });
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toBe("Cannot use the sink secret: the part after whsec_ is not non-empty base64");
    expect(message).not.toContain("not-base64");
  });
});
