// Spans of one delivery exported with OpenTelemetry's OTLP/HTTP exporter (the setup docs/observability.md
// shows for Bun) to a local collector started here, decoded from what arrived (OTLP JSON encoding).
import { afterAll, expect, test } from "bun:test";
import { createRequire } from "node:module";
import * as api from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { SimpleSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { TRACER_NAME } from "../../src/telemetry.ts";
import { eventBody, freshDatabase, invoice, SECRET, signedRequest } from "../support/helpers.ts";
import { startServer } from "../runtimes/server-process.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
afterAll(() => fresh.drop());

/** OTLP's JSON encoding of an export request (opentelemetry-proto, trace_service.proto), the parts read here. */
interface ExportRequest {
  resourceSpans: {
    scopeSpans: {
      scope: { name: string };
      spans: { name: string; traceId: string; spanId: string; parentSpanId?: string; attributes: { key: string; value: { stringValue?: string } }[] }[];
    }[];
  }[];
}

test("one delivery's spans reach an OTLP/HTTP collector: server, receive and process, with the event's messaging attributes", async () => {
  const received: { type: string | null; body: ExportRequest }[] = [];
  const collector = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      received.push({ type: request.headers.get("content-type"), body: (await request.json()) as ExportRequest });
      return Response.json({});
    },
  });
  const provider = new TracerProvider({
    spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `http://127.0.0.1:${collector.port}/v1/traces` }) })],
  });
  try {
    const app = createApp({
      db: fresh.db,
      endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "sync" }]),
      telemetry: { api, tracer: provider.getTracer(TRACER_NAME) },
      log: () => {},
    });
    const body = eventBody("evt_otlp_1", "invoice.paid", invoice({ id: "in_otlp_1", status: "paid", amount_paid: 2000 }));
    expect((await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe", body))).status).toBe(200);
    await provider.forceFlush();
  } finally {
    await provider.shutdown();
    collector.stop(true);
  }
  expect(received.every((r) => r.type?.startsWith("application/json"))).toBe(true);
  const spans = received.flatMap((r) => r.body.resourceSpans.flatMap((rs) => rs.scopeSpans.filter((s) => s.scope.name === TRACER_NAME).flatMap((s) => s.spans)));
  expect(spans.map((s) => s.name).sort()).toEqual(["POST /webhooks/:provider/:endpoint", "process billing", "receive billing"]);
  const byName = new Map(spans.map((s) => [s.name, s]));
  expect(new Set(spans.map((s) => s.traceId)).size).toBe(1);
  expect(byName.get("receive billing")?.parentSpanId).toBe(byName.get("POST /webhooks/:provider/:endpoint")?.spanId);
  expect(byName.get("process billing")?.parentSpanId).toBe(byName.get("receive billing")?.spanId);
  const attributes = Object.fromEntries(byName.get("receive billing")!.attributes.map((a) => [a.key, a.value.stringValue]));
  expect(attributes).toMatchObject({ "messaging.message.id": "evt_otlp_1", "messaging.destination.name": "billing", "webhook_inbox.outcome": "processed" });
});

test("`bun run serve` with docs/observability/otel-bun-preload.ts exports a delivery's spans to OTEL_EXPORTER_OTLP_ENDPOINT under OTEL_SERVICE_NAME", async () => {
  const received: ExportRequest[] = [];
  const collector = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      received.push((await request.json()) as ExportRequest);
      return Response.json({});
    },
  });
  const db = await freshDatabase();
  try {
    const server = await startServer({
      command: [process.execPath, "--preload", "./docs/observability/otel-bun-preload.ts", "src/bin/serve.ts"],
      env: {
        DATABASE_URL: db.url,
        STRIPE_WEBHOOK_SECRET: SECRET,
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`,
        OTEL_BSP_SCHEDULE_DELAY: "100",
        OTEL_SERVICE_NAME: "inbox-under-test",
      },
    });
    try {
      const body = eventBody("evt_otlp_preload", "invoice.paid", invoice({ id: "in_otlp_preload", status: "paid", amount_paid: 2000 }));
      expect((await fetch(await signedRequest(`${server.base}/webhooks/stripe`, body))).status).toBe(200);
      const names = () =>
        received.flatMap((r) => r.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((s) => s.spans.map((span) => span.name))));
      await waitUntil("the delivery's spans at the collector", async () => names().includes("process billing"), { timeoutMs: 10_000, intervalMs: 50 });
      expect(names()).toEqual(expect.arrayContaining(["POST /webhooks/:provider/:endpoint", "receive billing", "process billing"]));
      const service = (received[0] as unknown as { resourceSpans: { resource: { attributes: { key: string; value: { stringValue?: string } }[] } }[] })
        .resourceSpans[0]?.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue;
      expect(service).toBe("inbox-under-test");
    } finally {
      expect(await server.stop()).toBe(0);
    }
  } finally {
    collector.stop(true);
    await db.drop();
  }
}, 60_000);

test("Deno's built-in OpenTelemetry (OTEL_DENO=true) exports the spans the Deno entry makes through npm:@opentelemetry/api", async () => {
  const received: ExportRequest[] = [];
  const collector = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      // Deno also exports logs and metrics to the same endpoint: only traces are read here.
      if (new URL(request.url).pathname === "/v1/traces") received.push((await request.json()) as ExportRequest);
      return Response.json({});
    },
  });
  const db = await freshDatabase();
  const deno = (createRequire(import.meta.url)("deno/install_api.cjs") as { runInstall(): string }).runInstall();
  try {
    const server = await startServer({
      command: [deno, "run", "--allow-net", "--allow-env", "--allow-read=sql", "src/adapter/deno/serve.ts"],
      env: {
        DATABASE_URL: db.url,
        STRIPE_WEBHOOK_SECRET: SECRET,
        DENO_NO_UPDATE_CHECK: "1",
        NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/",
        OTEL_DENO: "true",
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      },
    });
    try {
      const body = eventBody("evt_otlp_deno", "invoice.paid", invoice({ id: "in_otlp_deno", status: "paid", amount_paid: 2000 }));
      expect((await fetch(await signedRequest(`${server.base}/webhooks/stripe`, body))).status).toBe(200);
      const names = () => received.flatMap((r) => r.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((s) => s.spans.map((span) => span.name))));
      await waitUntil("the Deno delivery's spans at the collector", async () => names().includes("process billing"), { timeoutMs: 20_000, intervalMs: 100 });
      expect(names()).toEqual(expect.arrayContaining(["POST /webhooks/:provider/:endpoint", "receive billing", "process billing"]));
    } finally {
      await server.stop();
    }
  } finally {
    collector.stop(true);
    await db.drop();
  }
}, 60_000);
