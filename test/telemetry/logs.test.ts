// Structured logs (src/log.ts): one JSON object per line with level, time and message, LOG_LEVEL, the
// trace and span ids of a traced delivery; and no secret in any line the commands print, under
// deliveries with good and bad signatures, a wrong admin token, a refused Stripe key and a failing sink.
import { afterAll, expect, test } from "bun:test";
import * as api from "@opentelemetry/api";
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { jsonLines, readLogLevel } from "../../src/log.ts";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { TRACER_NAME } from "../../src/telemetry.ts";
import { FakeStripeStore } from "../../src/dev/fake-stripe/store.ts";
import { startFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { startServer } from "../runtimes/server-process.ts";
import { eventBody, freshDatabase, invoice, OTHER_SECRET, SECRET, signedRequest } from "../support/helpers.ts";

const fresh = await freshDatabase();
afterAll(() => fresh.drop());

test("`jsonLines()` writes one JSON object per line with level, time and message, and drops lines below its level", () => {
  const lines: string[] = [];
  const log = jsonLines({ level: "warn", write: (text) => lines.push(text), now: () => new Date("2026-12-02T04:00:00.000Z") });
  log({ worker: "started", concurrency: 4 });
  log({ event_id: "evt_1", outcome: "failed", level: "warn", message: "worker failed" });
  log({ event_id: "evt_2", outcome: "needs_review", level: "error" });
  expect(lines.map((l) => JSON.parse(l))).toEqual([
    { event_id: "evt_1", outcome: "failed", level: "warn", message: "worker failed", time: "2026-12-02T04:00:00.000Z" },
    { event_id: "evt_2", outcome: "needs_review", level: "error", message: "event_id evt_2", time: "2026-12-02T04:00:00.000Z" },
  ]);
  const all: string[] = [];
  jsonLines({ write: (t) => all.push(t) })({ worker: "started" });
  expect(JSON.parse(all[0]!)).toMatchObject({ worker: "started", level: "info", message: "worker started" });
  expect(all[0]!.startsWith('{"worker":"started"')).toBe(true); // what operators' greps and tests key on
  expect(readLogLevel({})).toBe("info");
  expect(() => readLogLevel({ LOG_LEVEL: "loud" })).toThrow('LOG_LEVEL must be debug, info, warn or error, got "loud"');
});

test("a traced delivery's log line carries its trace and span ids; a refused one is a warn line", async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  const lines: Record<string, unknown>[] = [];
  const app = createApp({
    db: fresh.db,
    endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "sync" }]),
    telemetry: { api, tracer: provider.getTracer(TRACER_NAME) },
    log: jsonLines({ write: (text) => lines.push(JSON.parse(text) as Record<string, unknown>) }),
  });
  const body = eventBody("evt_log_traced", "invoice.paid", invoice({ id: "in_log_traced", status: "paid", amount_paid: 2000 }));
  expect((await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe", body))).status).toBe(200);
  expect((await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe", body, { secret: OTHER_SECRET }))).status).toBe(400);
  const server = exporter.getFinishedSpans().find((s) => s.name === "POST /webhooks/:provider/:endpoint")!;
  expect(lines[0]).toMatchObject({
    endpoint: "billing",
    event_id: "evt_log_traced",
    outcome: "processed",
    status: 200,
    level: "info",
    message: "delivery",
    trace_id: server.spanContext().traceId,
    span_id: server.spanContext().spanId,
  });
  expect(lines[1]).toMatchObject({ outcome: "rejected", error: "signature_mismatch", status: 400, level: "warn" });
  await provider.shutdown();
});

test("no line that serve, worker and dispatch print holds a secret: signing secrets, API key, admin and metrics tokens, sink secret, database password", async () => {
  const secrets = {
    STRIPE_WEBHOOK_SECRET: "whsec_logscan0123456789abcdefghij",
    ADMIN_TOKEN: "admin-token-logscan-0123456789abcdefghij",
    METRICS_TOKEN: "metrics-token-logscan-0123456789abcdef",
    STRIPE_API_KEY: "sk_test_logscan0123456789abcdefghij",
    OUTBOX_SINK_SECRET: "whsec_bG9nc2NhbmxvZ3NjYW5sb2dzY2Fu",
  };
  // The database URL with a password: a role made for this test.
  const password = "pw-logscan-S3cret";
  await fresh.db.unsafe(`drop role if exists logscan; create role logscan login superuser password '${password}'`);
  const url = new URL(fresh.url);
  url.username = "logscan";
  url.password = password;
  // A Stripe API that refuses the key (the worker's start check), and a sink that refuses every message.
  const stripe = startFakeStripe({ store: Object.assign(new FakeStripeStore(), { apiKey: "sk_test_the_right_one_0123456789" }) });
  const sink = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("no", { status: 500 }) });
  const env = { DATABASE_URL: url.toString(), LOG_LEVEL: "debug", ...secrets };
  const outputs: string[] = [];
  try {
    const serve = await startServer({ command: [process.execPath, "src/bin/serve.ts"], env });
    try {
      const body = eventBody("evt_log_scan", "invoice.paid", invoice({ id: "in_log_scan", status: "paid", amount_paid: 2000 }));
      const hook = `${serve.base}/webhooks/stripe`;
      expect((await fetch(await signedRequest(hook, body, { secret: secrets.STRIPE_WEBHOOK_SECRET }))).status).toBe(200);
      expect((await fetch(await signedRequest(hook, body, { secret: OTHER_SECRET }))).status).toBe(400);
      expect((await fetch(hook, { method: "POST", body: "{}", headers: { "stripe-signature": `t=1,v1=${"0".repeat(64)}` } })).status).toBe(400);
      expect((await fetch(`${serve.base}/admin`, { headers: { authorization: `Basic ${btoa(`x:${secrets.ADMIN_TOKEN}x`)}` } })).status).toBe(401);
      expect((await fetch(`${serve.base}/metrics`, { headers: { authorization: `Bearer ${secrets.METRICS_TOKEN}` } })).status).toBe(200);
    } finally {
      await serve.stop();
      outputs.push(serve.output());
    }
    for (const command of [
      { args: ["src/bin/worker.ts"], env: { ...env, STRIPE_API_BASE: stripe.url, STRIPE_ENDPOINT_KIND: "thin" } },
      { args: ["src/bin/dispatch.ts", "--max-attempts", "1"], env: { ...env, OUTBOX_SINK_URL: `http://127.0.0.1:${sink.port}/hook` } },
    ]) {
      const child = Bun.spawn([process.execPath, ...command.args], {
        env: { PATH: process.env.PATH, HOME: process.env.HOME, ...command.env },
        stdout: "pipe",
        stderr: "pipe",
      });
      const killer = setTimeout(() => child.kill("SIGTERM"), 4_000);
      const [out, err] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
      clearTimeout(killer);
      outputs.push(out, err);
    }
  } finally {
    sink.stop(true);
    await stripe.stop();
    await fresh.db.unsafe("drop role if exists logscan");
  }
  const printed = outputs.join("\n");
  // What ran: the delivery, the refused signature, the refused key and the failed send were each logged.
  expect(printed).toContain('"outcome":"processed"');
  expect(printed).toContain('"error":"signature_mismatch"');
  expect(printed).toContain("Stripe refused STRIPE_API_KEY");
  expect(printed).toContain('"dispatcher":"started"');
  for (const [name, value] of Object.entries(secrets)) expect({ name, found: printed.includes(value) }).toEqual({ name, found: false });
  expect(printed.includes(password)).toBe(false);
  expect(printed.match(/whsec_[A-Za-z0-9+/=]{6,}|[sr]k_(test|live)_[A-Za-z0-9]{6,}/g)).toBeNull();
}, 90_000);
