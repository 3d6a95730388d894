// OpenTelemetry spans of one event (src/telemetry.ts): the HTTP server span, `receive <endpoint>`
// recording it, `process <endpoint>` applying it (in the request, or by the worker with a link to the
// recording span through the traceparent stored on the inbox row), and the outbox dispatcher's `send`,
// whose traceparent the sink receives. Spans go to the SDK's in-memory exporter; real PostgreSQL.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import * as api from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from "@opentelemetry/sdk-trace";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { processClaim } from "../../src/worker/process-claim.ts";
import { claimOutboxBatch } from "../../src/outbox/claim.ts";
import { deliverClaimed } from "../../src/outbox/deliver-claimed.ts";
import { httpSink } from "../../src/outbox/http-sink.ts";
import { TRACER_NAME, type Telemetry } from "../../src/telemetry.ts";
import { eventBody, freshDatabase, invoice, SECRET, signedRequest } from "../support/helpers.ts";
import { fakeWith, recentEvents, runBackfill } from "../reconcile/backfill-support.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
// The tracer is given to the app, not registered globally: other test files run in this process.
const telemetry: Telemetry = { api, tracer: provider.getTracer(TRACER_NAME) };
api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
afterAll(async () => {
  api.propagation.disable();
  await provider.shutdown();
  await fresh.drop();
});
beforeEach(async () => {
  exporter.reset();
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

const URL_DEFAULT = "http://receiver.test/webhooks/stripe";
/** The trace a proxy in front of the receiver started (W3C traceparent it sends). */
const UPSTREAM = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7" };

function appFor(mode: Mode, handlers = billingHandlers) {
  const endpoints = stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]).map((e) => ({ ...e, handlers }));
  return createApp({ db, endpoints, telemetry, log: () => {} });
}

async function deliver(mode: Mode, id: string, handlers = billingHandlers) {
  const body = eventBody(id, "invoice.paid", invoice({ id: `in_${id}`, status: "paid", amount_paid: 2000 }));
  const request = await signedRequest(URL_DEFAULT, body, { headers: { traceparent: `00-${UPSTREAM.traceId}-${UPSTREAM.spanId}-01` } });
  const response = await appFor(mode, handlers).fetch(request);
  return ((await response.json()) as { outcome: string }).outcome;
}

const named = (name: string): ReadableSpan => {
  const found = exporter.getFinishedSpans().filter((s) => s.name === name);
  expect(found.map((s) => s.name)).toEqual([name]);
  return found[0]!;
};
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
const traceparent = (span: ReadableSpan) => `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`;

/** Claims and processes every due row with tracing on, as `bun run worker` would. */
async function work() {
  for (const claim of await claimBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 5 })) {
    await processClaim(db, claim, { tables: { stripe: billingHandlers }, timeoutMs: 5_000, maxAttempts: 5, backoff: { baseMs: 1, capMs: 1 }, telemetry });
  }
}

describe("spans of one event", () => {
  test("sync: the server span continues the caller's trace; receive and process are its children; the rows carry their traceparents", async () => {
    expect(await deliver("sync", "evt_trace_sync")).toBe("processed");
    const server = named("POST /webhooks/:provider/:endpoint");
    const receive = named("receive billing");
    const process = named("process billing");
    expect(server.kind).toBe(api.SpanKind.SERVER);
    expect(server.spanContext().traceId).toBe(UPSTREAM.traceId);
    expect(parentOf(server)).toBe(UPSTREAM.spanId);
    expect(server.attributes).toMatchObject({ "http.request.method": "POST", "http.route": "/webhooks/:provider/:endpoint", "http.response.status_code": 200 });
    expect(parentOf(receive)).toBe(server.spanContext().spanId);
    expect(parentOf(process)).toBe(receive.spanContext().spanId);
    expect(receive.kind).toBe(api.SpanKind.CONSUMER);
    expect(receive.attributes).toMatchObject({
      "messaging.system": "stripe",
      "messaging.destination.name": "billing",
      "messaging.message.id": "evt_trace_sync",
      "messaging.operation.type": "receive",
      "webhook_inbox.outcome": "processed",
    });
    expect(process.attributes).toMatchObject({ "messaging.operation.type": "process", "webhook_inbox.outcome": "processed" });
    const [row] = await db<{ traceparent: string }[]>`select traceparent from webhook_inbox where event_id = 'evt_trace_sync'`;
    expect(row?.traceparent).toBe(traceparent(receive));
    const [message] = await db<{ traceparent: string }[]>`select traceparent from outbox`;
    expect(message?.traceparent).toBe(traceparent(process));
  });

  test("async: receive records `queued`; the worker's process span starts a trace linked to it, and the sink gets the send span's traceparent", async () => {
    expect(await deliver("async", "evt_trace_async")).toBe("queued");
    const receive = named("receive billing");
    expect(receive.attributes["webhook_inbox.outcome"]).toBe("queued");
    expect(exporter.getFinishedSpans().some((s) => s.name === "process billing")).toBe(false);
    exporter.reset();

    await work();
    const process = named("process billing");
    expect(process.kind).toBe(api.SpanKind.CONSUMER);
    expect(process.parentSpanContext).toBeUndefined();
    expect(process.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([
      [receive.spanContext().traceId, receive.spanContext().spanId],
    ]);
    expect(process.attributes).toMatchObject({ "messaging.message.id": "evt_trace_async", "webhook_inbox.outcome": "processed", "webhook_inbox.attempt": 1 });

    // The sink: a local HTTP server recording the headers it was sent.
    const seen: string[] = [];
    const sink = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: (request) => (seen.push(request.headers.get("traceparent") ?? "none"), new Response(null, { status: 204 })),
    });
    try {
      const send = httpSink({ url: `http://127.0.0.1:${sink.port}/hook`, secret: "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=" });
      const [message] = await claimOutboxBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 5 });
      expect(message?.traceparent).toBe(traceparent(process));
      const result = await deliverClaimed(db, message!, { send, timeoutMs: 5_000, maxAttempts: 5, backoff: { baseMs: 1, capMs: 1 }, telemetry });
      expect(result.outcome).toBe("published");
    } finally {
      sink.stop(true);
    }
    const sent = named("send InvoicePaymentBooked");
    expect(sent.kind).toBe(api.SpanKind.PRODUCER);
    expect(parentOf(sent)).toBe(process.spanContext().spanId);
    expect(sent.spanContext().traceId).toBe(process.spanContext().traceId);
    expect(seen).toEqual([traceparent(sent)]);
  });

  test("hybrid: a failed attempt is an error on the process span (error.type), receive says `queued`, and the worker's retry is linked", async () => {
    let calls = 0;
    const flaky = handlerTable(billingHandlers, {});
    const failingOnce = handlerTable({
      ...flaky,
      "invoice.paid": async (tx, object, context) => {
        if (++calls === 1) throw new TypeError("not yet");
        await flaky["invoice.paid"]!(tx, object, context);
      },
    });
    expect(await deliver("hybrid", "evt_trace_hybrid", failingOnce)).toBe("queued");
    const receive = named("receive billing");
    const attempt = named("process billing");
    expect(parentOf(attempt)).toBe(receive.spanContext().spanId);
    expect(attempt.status.code).toBe(api.SpanStatusCode.ERROR);
    expect(attempt.attributes).toMatchObject({ "error.type": "TypeError", "webhook_inbox.outcome": "queued" });
    expect(receive.attributes["webhook_inbox.outcome"]).toBe("queued");
    exporter.reset();
    await db`update webhook_inbox set available_at = now()`;
    await work();
    const retry = named("process billing");
    expect(retry.links[0]?.context.spanId).toBe(receive.spanContext().spanId);
    expect(retry.attributes["webhook_inbox.outcome"]).toBe("processed");
  });

  test("without telemetry nothing is traced and the rows carry no traceparent", async () => {
    const endpoints = stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "sync" }]);
    const app = createApp({ db, endpoints, log: () => {} });
    const body = eventBody("evt_trace_off", "invoice.paid", invoice({ id: "in_trace_off", status: "paid", amount_paid: 2000 }));
    expect((await app.fetch(await signedRequest(URL_DEFAULT, body))).status).toBe(200);
    expect(exporter.getFinishedSpans()).toEqual([]);
    expect(await db`select traceparent from webhook_inbox union all select traceparent from outbox`).toEqual([
      { traceparent: null },
      { traceparent: null },
    ] as never);
  });

  test("backfill: one `backfill <endpoint>` span per run, with the events it read and recorded", async () => {
    const events = recentEvents(Math.floor(Date.now() / 1000) - 3_600).slice(0, 6);
    const fake = fakeWith(events, false);
    try {
      const summary = await runBackfill(db, fake, { telemetry });
      expect(summary.fresh).toBe(6);
    } finally {
      await fake.stop();
    }
    const run = named("backfill billing");
    expect(run.attributes).toMatchObject({
      "messaging.destination.name": "billing",
      "webhook_inbox.account": "",
      "webhook_inbox.backfill.status": "done",
      "webhook_inbox.backfill.events": 6,
      "webhook_inbox.backfill.fresh": 6,
    });
  });
});
