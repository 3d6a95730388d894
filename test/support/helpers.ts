import { readdirSync, readFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import postgres from "postgres";
import { connect, type Db } from "../../src/db/db.ts";
import type { InboxKey, InboxRow } from "../../src/inbox/inbox.ts";
import { signStripePayload, stripeSubject } from "../../src/providers/stripe.ts";
import { withDatabase } from "../../src/dev/scratch-database.ts";
import { TEMPLATE_DB } from "../../src/dev/test-cluster.ts";
import { stripeEventBody } from "../../src/dev/stripe-event.ts";

/** A test signing secret (never a real one). */
export const SECRET = "whsec_test_0123456789abcdefghijklmnop";
export const OTHER_SECRET = "whsec_test_zyxwvutsrqponmlkjihgfedcba";

export const LIFECYCLE_DIR = join(import.meta.dir, "..", "fixtures", "stripe", "invoice-lifecycle");

let counter = 0;

/** A fresh database for one test file, cloned from the migrated template (or empty with `migrated: false`). */
export async function freshDatabase(options: { migrated?: boolean } = {}): Promise<{ url: string; db: Db; drop(): Promise<void> }> {
  const admin = adminUrl();
  const name = `t_${process.pid}_${++counter}_${Math.random().toString(36).slice(2, 8)}`;
  const sql = postgres(admin, { max: 1, onnotice: () => {} });
  await sql.unsafe(options.migrated === false ? `create database ${name}` : `create database ${name} template ${TEMPLATE_DB}`);
  await sql.end();
  const url = withDatabase(admin, name);
  const db = connect(url, { max: 10 });
  return {
    url,
    db,
    async drop() {
      await db.end({ timeout: 5 });
      const s = postgres(admin, { max: 1, onnotice: () => {} });
      await s.unsafe(`drop database if exists ${name} with (force)`);
      await s.end();
    },
  };
}

/** The server's admin URL set by test/setup.ts. */
export function adminUrl(): string {
  const url = process.env.TEST_ADMIN_URL;
  if (!url) throw new Error("TEST_ADMIN_URL is not set: run the tests with `bun test` (test/setup.ts preload)");
  return url;
}

/** `n` separate single-connection pools: one connection per concurrent actor. Close with `closeAll`. */
export function connections(url: string, n: number): Db[] {
  return Array.from({ length: n }, () => connect(url, { max: 1 }));
}

export async function closeAll(dbs: Db[]): Promise<void> {
  await Promise.all(dbs.map((d) => d.end({ timeout: 5 })));
}

/** Reads a fixture's exact bytes. */
export function fixture(name: string): string {
  return readFileSync(join(LIFECYCLE_DIR, name), "utf8");
}

/** All lifecycle fixtures as `{ name, body }`, in file order. */
export function lifecycle(): { name: string; body: string }[] {
  return readFixtures(LIFECYCLE_DIR);
}

/** The fixtures folder of this repository: test/fixtures/. */
export const FIXTURES_DIR = join(import.meta.dir, "..", "fixtures");

/**
 * Every `.json` file of a fixtures folder as `{ name, body }` (name: the file name; body: its exact
 * bytes as UTF-8 text), in name order. `dir` is relative to test/fixtures/ (e.g.
 * "stripe/invoice-lifecycle") or absolute.
 * @throws Error when the folder holds no `.json` file (an empty set would make a contract pass vacuously), or cannot be read.
 */
export function readFixtures(dir: string): { name: string; body: string }[] {
  const folder = isAbsolute(dir) ? dir : join(FIXTURES_DIR, dir);
  const names = readdirSync(folder)
    .filter((f) => f.endsWith(".json"))
    .sort();
  if (names.length === 0) throw new Error(`No .json fixtures in ${folder}`);
  return names.map((name) => ({ name, body: readFileSync(join(folder, name), "utf8") }));
}

/** A Stripe invoice object with sensible defaults (amounts in minor units). */
export function invoice(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: "in_test_1",
    object: "invoice",
    customer: "cus_test_1",
    currency: "usd",
    amount_due: 2000,
    amount_paid: 0,
    status: "draft",
    ...overrides,
  };
}

/** A Stripe event body (pretty-printed like Stripe's) for `type` with `object` as `data.object`. */
export const eventBody = stripeEventBody;

/** A VerifiedEvent built from a body (for calling receiveSync directly). */
export function verified(body: string) {
  const payload = JSON.parse(body) as Record<string, unknown>;
  // Dated by `created` as the Stripe provider does (stored as data, event_created_at).
  const created = typeof payload.created === "number" ? { createdAt: new Date(payload.created * 1000) } : {};
  return { id: payload.id as string, type: payload.type as string, payload, subject: stripeSubject(payload), body, ...created };
}

/** A signed webhook request, as Stripe would send it. `timestampSec` defaults to now. */
export async function signedRequest(
  url: string,
  body: string,
  options: { secret?: string; timestampSec?: number; headers?: Record<string, string> } = {},
): Promise<Request> {
  const signature = await signStripePayload(body, options.secret ?? SECRET, options.timestampSec ?? Math.floor(Date.now() / 1000));
  return new Request(url, {
    method: "POST",
    headers: { "content-type": "application/json; charset=utf-8", "stripe-signature": signature, ...options.headers },
    body,
  });
}

/** `select count(*)::int` of a table (optionally with a where clause on trusted test text). */
export async function count(db: Db, table: string, where = "true"): Promise<number> {
  const rows = await db.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table} where ${where}`);
  return rows[0]?.n ?? 0;
}

/**
 * Moves the inbox rows of `eventIds` `ms` into the past, as if received then: the state row's
 * `received_at` (and `processed_at`, `needs_review_at` where set) and its payload row's `received_at`,
 * which moves the payload into that week's partition (sql/0027: a payload row is found by its state row's
 * key and received_at), in one statement. The sender's `event_created_at` is left as it is.
 */
export async function backdateInbox(db: Db, eventIds: string | readonly string[], ms: number): Promise<void> {
  const ids = typeof eventIds === "string" ? [eventIds] : [...eventIds];
  await db`
    with old as (
      select provider, endpoint, event_id, received_at
        from webhook_inbox
       where event_id = any(${ids}::text[])
    ), payload as (
      update webhook_inbox_payloads p
         set received_at = now() - ${ms} * interval '1 millisecond'
        from old o
       where (p.provider, p.endpoint, p.event_id, p.received_at) = (o.provider, o.endpoint, o.event_id, o.received_at)
    )
    update webhook_inbox w
       set received_at = now() - ${ms} * interval '1 millisecond',
           processed_at = case when w.processed_at is not null then now() - ${ms} * interval '1 millisecond' end,
           needs_review_at = case when w.needs_review_at is not null then now() - ${ms} * interval '1 millisecond' end
      from old o
     where (w.provider, w.endpoint, w.event_id) = (o.provider, o.endpoint, o.event_id)
  `;
}

/** The inbox rows of `eventId` with their payload rows (sql/0027), as `select *` of both would show them, by provider and endpoint. */
export async function inboxRowsOf(db: Db, eventId: string): Promise<Record<string, unknown>[]> {
  return db`
    select w.*, p.payload, p.raw_body, p.payload_sanitized, p.received_at is null as payload_dropped
      from webhook_inbox w
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
     where w.event_id = ${eventId}
     order by w.provider, w.endpoint
  `;
}

/**
 * An inbox row for `key` as `insertInbox` takes it (a state row and its payload row, as a delivery writes
 * them): type `x`, payload `{}`, from a webhook, undated, the platform's, no mode, unsettled, no trace;
 * `fields` override any of them.
 */
export function inboxRowFor(key: InboxKey, fields: Partial<Omit<InboxRow, "key">> = {}): InboxRow {
  return {
    key,
    type: "x",
    payload: "{}",
    rawBody: null,
    replaced: null,
    source: "webhook",
    createdAtSec: null,
    account: "",
    livemode: null,
    settled: null,
    traceparent: null,
    ...fields,
  };
}
