// Test support for the operator's page: a real receiver (Bun.serve on a free loopback port, the
// production wiring of src/runtime/receiver.ts) on a fresh database, and rows to look at.
import { loadConfig } from "../../src/config.ts";
import type { Db } from "../../src/db/db.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { fillInboxHours } from "../../src/inbox/hours.ts";
import { handlerTables } from "../../src/receiver/endpoints.ts";
import { receiverApp } from "../../src/runtime/receiver.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { backdateInbox, eventBody, freshDatabase, invoice, lifecycle, SECRET, signedRequest } from "../support/helpers.ts";

/** The admin token of every admin test (never a real one). */
export const ADMIN_TOKEN = "admin-test-token-0123456789abcdefghij";

/** A running receiver with the operator's page, on its own database. */
export interface AdminServer {
  url: string;
  db: Db;
  /** Posts a signed event to the billing endpoint; resolves to the answer's outcome. */
  deliver(body: string): Promise<string>;
  /** Runs a worker until `done()` holds (or 10 s pass), then stops it. */
  work(done: () => Promise<boolean>): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a receiver with `ADMIN_TOKEN` set (and `ADMIN_READONLY=true` when `readonly`), and any other settings in `env`. */
export async function startAdminServer(options: { readonly?: boolean; env?: Record<string, string> } = {}): Promise<AdminServer> {
  const database = await freshDatabase();
  const config = loadConfig({
    DATABASE_URL: database.url,
    STRIPE_WEBHOOK_SECRET: SECRET,
    ADMIN_TOKEN,
    ADMIN_READONLY: options.readonly ? "true" : "false",
    ...options.env,
  });
  const app = receiverApp(config, database.db, { log: () => {} });
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (request) => app.fetch(request) });
  const url = `http://127.0.0.1:${server.port}`;
  return {
    url,
    db: database.db,
    async deliver(body) {
      const response = await app.fetch(await signedRequest(`${url}/webhooks/stripe`, body));
      return ((await response.json()) as { outcome: string }).outcome;
    },
    async work(done) {
      const stop = new AbortController();
      const worker = runWorker({ db: database.db, signal: stop.signal, tables: handlerTables, pollMs: 50, listen: false, log: () => {} });
      const deadline = Date.now() + 10_000;
      try {
        while (!(await done()) && Date.now() < deadline) await Bun.sleep(20);
      } finally {
        stop.abort();
        await worker;
      }
    },
    async stop() {
      await server.stop(true);
      await database.drop();
    },
  };
}

/**
 * A needs-review row as a worker leaves it after its last attempt failed for a passing reason
 * (payload valid: a requeue lets the worker process it): written by insertInbox as the receiver parks
 * an event (a state row and its payload row), then given its attempts. `receivedAgoSec` back-dates it
 * (with its payload row: backdateInbox).
 */
export async function parkRow(
  db: Db,
  eventId: string,
  options: { type?: string; attempts?: number; receivedAgoSec?: number; invoiceId?: string } = {},
): Promise<void> {
  const type = options.type ?? "invoice.created";
  const body = eventBody(eventId, type, invoice({ id: options.invoiceId ?? `in_${eventId}` }));
  const inserted = await insertInbox(db, [
    {
      key: { provider: "stripe", endpoint: "billing", eventId },
      type,
      payload: body,
      rawBody: null,
      replaced: null,
      source: "webhook",
      createdAtSec: null,
      account: "",
      livemode: false, // the body's, as the Stripe provider reads it
      settled: null,
      failed: { error: "Error: connection terminated unexpectedly", parked: true, backoff: { baseMs: 60_000, capMs: 600_000 } },
      traceparent: null,
    },
  ]);
  if (inserted.size !== 1) throw new Error(`Cannot park ${eventId}: its inbox row exists already`);
  await db`update webhook_inbox set attempts = ${options.attempts ?? 10} where provider = 'stripe' and endpoint = 'billing' and event_id = ${eventId}`;
  if (options.receivedAgoSec) await backdateInbox(db, eventId, options.receivedAgoSec * 1000);
}

/** The state of the billing row of `eventId`, or undefined. */
export async function stateOf(db: Db, eventId: string): Promise<string | undefined> {
  const [row] = await db<{ state: string }[]>`select state from webhook_inbox_state where event_id = ${eventId}`;
  return row?.state;
}

/** Delivers the invoice lifecycle fixtures twice (the second time duplicates) through the receiver. */
export async function deliverLifecycle(server: AdminServer): Promise<void> {
  for (const f of lifecycle()) await server.deliver(f.body);
  for (const f of lifecycle()) await server.deliver(f.body);
}

/** Basic credentials for the admin token. */
export function basic(token = ADMIN_TOKEN): string {
  return `Basic ${btoa(`operator:${token}`)}`;
}

/**
 * Rows for the overview's chart: `perMinute` rows in each of the last 60 minutes, mostly processed,
 * some ignored, a few unprocessed and needs-review (ids `evt_hour_<minute>_<n>`).
 */
export async function seedLastHour(db: Db, perMinute = 6): Promise<void> {
  // Each a state row and its payload row under the same key and received_at (sql/0027), in one
  // statement as insertInbox writes them, with received_at spread over the hour instead of now().
  await db`
    with r as (
      select 'stripe'::text as provider, 'billing'::text as endpoint, 'evt_hour_' || m || '_' || n as event_id,
             now() - m * interval '1 minute' - n * interval '1 second' as received_at, kind
        from generate_series(0, 59) as m, generate_series(1, ${perMinute} + (m % 5)) as n,
             lateral (select (m * 7 + n * 3) % 10 as kind) k
    ), state as (
      insert into webhook_inbox (provider, endpoint, event_id, event_type, received_at, processed_at, outcome, needs_review_at, last_error)
      select provider, endpoint, event_id, 'invoice.finalized', received_at,
             case when kind < 8 then now() end,
             case when kind < 7 then 'processed' when kind < 8 then 'ignored' end,
             case when kind = 9 then now() end,
             case when kind = 9 then 'Error: seeded failure' end
        from r
    )
    insert into webhook_inbox_payloads (provider, endpoint, event_id, received_at, payload)
    select provider, endpoint, event_id, received_at, '{"id": "seed"}'::jsonb
      from r
  `;
}

/**
 * Thirty days of rows for the overview's day charts at `endpoint` (default billing): on each day before
 * today `200 + 40 × (day % 7)` rows (ids `evt_day_<endpoint>_<day>_<n>`), one every 3 minutes from 00:30
 * UTC, applied within 2 s; every 4th day 10 of them retried, every 5th day one parked; on day 20 (9 days
 * ago) every row applied 5 hours late (a worker down all morning). Then the hourly rollup computed for all
 * of them, as the scrapes and page loads since would have (each computes only a few hours).
 */
export async function seedThirtyDays(db: Db, endpoint = "billing", provider = "stripe"): Promise<void> {
  await db`
    with r as (
      select ${provider}::text as provider, ${endpoint}::text as endpoint, 'evt_day_' || ${endpoint} || '_' || d || '_' || n as event_id, d, n,
             date_trunc('day', now(), 'UTC') - (29 - d) * interval '1 day' + interval '30 minutes' + n * interval '3 minutes' as received_at,
             n % 37 = 4 and d % 5 = 0 and n < 40 as parked,
             n % 20 = 3 and d % 4 = 0 as retried
        from generate_series(0, 28) as d, generate_series(1, 200 + 40 * (d % 7)) as n
    )
    insert into webhook_inbox (provider, endpoint, event_id, event_type, received_at, available_at, attempts, processed_at, outcome,
                               needs_review_at, last_error)
    select provider, endpoint, event_id, 'invoice.paid', received_at, received_at,
           case when parked then 10 when retried then 3 else 1 end,
           case when parked then null
                when d = 20 then received_at + interval '5 hours'
                else received_at + (n % 50) * interval '40 milliseconds' end,
           case when parked then null else 'processed' end,
           case when parked then received_at + interval '1 minute' end,
           case when parked then 'Error: seeded failure' end
      from r
  `;
  // Rows were put into past hours, which no delivery does (received_at is its transaction's start): page
  // loads before this may have kept those hours without them, so every hour is computed again.
  await db`delete from webhook_inbox_hours_filled`;
  await fillInboxHours(db, { maxHours: 31 * 24 });
}

/** A heartbeat row as a worker or dispatcher writes it (loop/heartbeat.ts), its last beat `beatAgoSec` ago. */
export async function heartbeatRow(db: Db, kind: "worker" | "dispatcher", host: string, beatAgoSec: number, detail = ""): Promise<void> {
  await db`
    insert into loop_heartbeats (id, kind, host, pid, detail, beat_every_ms, started_at, beat_at, last_claim_at, claimed)
    values (${`${kind}-${host}`}, ${kind}, ${host}, 4242, ${detail}, 10000, now() - interval '1 hour', now() - ${beatAgoSec} * interval '1 second',
            now() - ${beatAgoSec + 5} * interval '1 second', 17)
  `;
}
