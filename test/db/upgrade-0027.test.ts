// Upgrading to the seed's key (sql/0027) from a 0025 inbox (one unpartitioned table) and from a 0026 inbox
// (partitioned by the sender's creation time, where one event id could have two rows), each holding rows of
// every provider as the code of its day wrote them (dated and undated, settled, unsettled, needs-review):
// after the upgrade every row is there once, the sender's retry of every old event is a duplicate, and
// nothing is applied twice (review of fcab188, R1 and R2; trial N1).
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import postgres from "postgres";
import { Webhook } from "standardwebhooks";
import { migrate } from "../../src/db/migrate.ts";
import { readProviderFixtures, signDelivery, type DeliveryProvider } from "../../src/dev/provider-delivery.ts";
import { handlerTable, type HandlerTable } from "../../src/handlers/handler-table.ts";
import type { VerifiedEvent, WebhookProvider } from "../../src/providers/provider.ts";
import { providerNamed } from "../../src/providers/registry.ts";
import { createApp, type App } from "../../src/receiver/app.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { FIXTURES_DIR, freshDatabase, SECRET } from "../support/helpers.ts";
import { workOff } from "../support/work.ts";

const databases: { drop(): Promise<void> }[] = [];
afterAll(async () => {
  for (const d of databases) await d.drop();
});

const ALL = loadMigrations();
const NOW_SEC = Math.floor(Date.now() / 1000);

/** One signed delivery of each provider's fixture, the secret its endpoint verifies with, and the events it carries. */
interface Sent {
  provider: string;
  endpoint: string;
  secret: string;
  url: string;
  request: { headers: Record<string, string>; body: string };
  events: VerifiedEvent[];
}

const SECRETS: Record<string, string> = {
  stripe: SECRET,
  github: "github-secret-one-0123456789",
  shopify: "shopify-secret-one-0123456789",
  paddle: "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI",
  adyen: "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00",
  "standard-webhooks": `whsec_${btoa("upgrade-secret-32-bytes-long!!!!")}`,
};
const FIXTURE: Record<DeliveryProvider, string> = {
  stripe: "stripe/invoice-lifecycle/03_invoice.paid_evt_1SkB1cLgUG5tbmjc0paidxx.json",
  github: "github/push-main.json",
  shopify: "shopify/orders-paid-1001.json",
  paddle: "paddle/02-transaction.completed.json",
  adyen: "adyen/single-3.json",
};

/** Each provider's delivery, signed now, with the events its own verifier reads from it. */
async function deliveries(): Promise<Sent[]> {
  const sent: Sent[] = [];
  for (const [name, file] of Object.entries(FIXTURE) as [DeliveryProvider, string][]) {
    const [fixture] = readProviderFixtures([join(FIXTURES_DIR, file)]);
    const request = await signDelivery(name, fixture!, SECRETS[name]!, NOW_SEC);
    sent.push(await withEvents(name, `${name}-ep`, request));
  }
  const body = JSON.stringify({
    type: "subscription.renewed",
    timestamp: "2025-11-30T00:12:00Z",
    data: { id: "sub_upgrade_1", object: "subscription" },
  });
  const id = "msg_upgrade_standard_1";
  const headers = {
    "content-type": "application/json",
    "webhook-id": id,
    "webhook-timestamp": String(NOW_SEC),
    "webhook-signature": new Webhook(SECRETS["standard-webhooks"]!).sign(id, new Date(NOW_SEC * 1000), body),
  };
  sent.push(await withEvents("standard-webhooks", "sw-ep", { headers, body }));
  return sent;
}

async function withEvents(provider: string, endpoint: string, request: Sent["request"]): Promise<Sent> {
  const p = providerNamed(provider) as WebhookProvider;
  const input = {
    body: request.body,
    headers: new Headers(request.headers),
    secrets: [SECRETS[provider]!],
    toleranceSec: 300,
    nowMs: Date.now(),
  };
  const events = p.verifyAll ? await p.verifyAll(input) : [await p.verify(input)];
  return { provider, endpoint, secret: SECRETS[provider]!, url: `http://receiver.test/webhooks/${provider}/${endpoint}`, request, events };
}

/** The time the code before 0027 keyed an event by: Shopify's X-Shopify-Triggered-At and Adyen's eventDate too (before 6c8c70b). */
function oldCreated(sent: Sent, event: VerifiedEvent): Date | null {
  if (sent.provider === "shopify") return new Date(sent.request.headers["X-Shopify-Triggered-At"]!);
  if (sent.provider === "adyen") return new Date(String((event.payload.NotificationRequestItem as { eventDate: string }).eventDate));
  return event.createdAt ?? null;
}

type State = "processed" | "unprocessed" | "needs_review";

/**
 * Writes `event` as the inbox row the code of schema `at` (25 or 26) wrote: one table with the payload in
 * it; the creation time of the key as that code took it (0025: the arrival time when none; 0026:
 * '-infinity', "undated", for providers it keyed by id alone, unless `dated` forces the old dating).
 */
async function oldRow(
  sql: postgres.Sql,
  at: 25 | 26,
  sent: Sent,
  event: VerifiedEvent,
  state: State,
  options: { created?: Date | null; source?: string } = {},
) {
  const created =
    options.created !== undefined
      ? options.created
      : at === 26 && !["stripe", "paddle"].includes(sent.provider)
        ? null
        : oldCreated(sent, event);
  const undated = at === 25 ? sql`now()` : sql`'-infinity'::timestamptz`;
  await sql`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, event_created_at, source,
                               processed_at, outcome, needs_review_at, last_error, attempts)
    values (${sent.provider}, ${sent.endpoint}, ${event.id}, ${event.type}, ${JSON.stringify(event.payload)}::text::jsonb,
            ${created === null ? undated : sql`${created}::timestamptz`}, ${options.source ?? "webhook"},
            ${state === "processed" ? sql`now()` : null}, ${state === "processed" ? "processed" : null},
            ${state === "needs_review" ? sql`now()` : null}, ${state === "needs_review" ? "Cannot apply: parked before the upgrade" : null},
            ${state === "unprocessed" ? 0 : 1})
  `;
}

/** Receivers for every provider's endpoint, sync, whose handlers count every run (no business key of their own). */
function receivers(db: postgres.Sql, sent: Sent[]): { app: App; tables: Record<string, HandlerTable> } {
  const count = async (tx: postgres.TransactionSql, _o: Record<string, unknown>, c: { provider: string; eventId: string }) =>
    void (await tx`insert into handler_runs (provider, event_id) values (${c.provider}, ${c.eventId})`);
  const tables = Object.fromEntries(
    sent.map((s) => [s.provider, handlerTable(Object.fromEntries(s.events.map((e) => [e.type, count])))]),
  ) as Record<string, HandlerTable>;
  const app = createApp({
    db,
    endpoints: sent.map((s) => ({
      name: s.endpoint,
      provider: providerNamed(s.provider)!,
      secrets: [s.secret],
      handlers: tables[s.provider]!,
      mode: "sync" as const,
    })),
    log: () => {},
  });
  return { app, tables };
}

/** Posts every provider's delivery again, as its sender retries: the status of each. */
async function retryAll(app: App, sent: Sent[]): Promise<{ provider: string; status: number; text: string }[]> {
  const out = [];
  for (const s of sent) {
    const res = await app.fetch(new Request(s.url, { method: "POST", headers: s.request.headers, body: s.request.body }));
    out.push({ provider: s.provider, status: res.status, text: await res.text() });
  }
  return out;
}

async function oldDatabase(at: 25 | 26): Promise<postgres.Sql> {
  const fresh = await freshDatabase({ migrated: false });
  databases.push(fresh);
  const sql = postgres(fresh.url, { max: 2, onnotice: () => {} });
  databases.push({ drop: () => sql.end({ timeout: 5 }) });
  await migrate(
    sql,
    ALL.filter((m) => m.version <= at),
  );
  return sql;
}

const inboxRows = (sql: postgres.Sql) =>
  sql<{ provider: string; event_id: string; state: string; created: number | null; payload: Record<string, unknown> | null }[]>`
    select w.provider, w.event_id, s.state, extract(epoch from w.event_created_at)::float8 as created, p.payload
      from webhook_inbox w
      join webhook_inbox_state s on (s.provider, s.endpoint, s.event_id) = (w.provider, w.endpoint, w.event_id)
      left join webhook_inbox_payloads p on (p.provider, p.endpoint, p.event_id, p.received_at) = (w.provider, w.endpoint, w.event_id, w.received_at)
     order by 1, 2
  `;

test("from 0025: every row of every provider is kept once with its state and payload, each sender's retry is a duplicate, and the queued row is applied once by the worker (review R1, R2)", async () => {
  const sql = await oldDatabase(25);
  const sent = await deliveries();
  for (const s of sent) for (const e of s.events) await oldRow(sql, 25, s, e, "processed");
  // A queued and a parked Stripe event beside them, received before the upgrade.
  const stripe = sent.find((s) => s.provider === "stripe")!;
  const queuedEvent = { ...stripe.events[0]!, id: "evt_upgrade_queued" };
  const parkedEvent = { ...stripe.events[0]!, id: "evt_upgrade_parked" };
  await oldRow(sql, 25, stripe, { ...queuedEvent, payload: { ...queuedEvent.payload, id: queuedEvent.id } }, "unprocessed");
  await oldRow(sql, 25, stripe, { ...parkedEvent, payload: { ...parkedEvent.payload, id: parkedEvent.id } }, "needs_review");
  const before = await sql<
    { provider: string; event_id: string; payload: unknown }[]
  >`select provider, event_id, payload from webhook_inbox order by 1, 2`;

  expect(await migrate(sql, ALL)).toEqual(ALL.filter((m) => m.version > 25).map((m) => m.name));
  const after = await inboxRows(sql);
  expect(after.map((r): unknown[] => [r.provider, r.event_id, r.payload])).toEqual(
    before.map((r): unknown[] => [r.provider, r.event_id, r.payload]),
  );
  expect(after.filter((r) => r.state !== "processed").map((r) => [r.event_id, r.state])).toEqual([
    ["evt_upgrade_parked", "needs_review"],
    ["evt_upgrade_queued", "unprocessed"],
  ]);
  // The sender's time is kept as data where it gave one; the arrival time 0019 filled in for GitHub and Standard Webhooks is not a creation time.
  const created = Object.fromEntries(after.filter((r) => !r.event_id.startsWith("evt_upgrade")).map((r) => [r.provider, r.created]));
  expect(created.github).toBeNull();
  expect(created["standard-webhooks"]).toBeNull();
  expect(created.stripe).toBe(Number(stripe.events[0]!.payload.created));
  expect(created.shopify).toBe(Date.parse("2022-01-01T00:00:05Z") / 1000);
  expect(await sql`select to_regclass('webhook_inbox_merged_0027') as t`).toEqual([{ t: null }] as never);

  await sql`create table handler_runs (provider text not null, event_id text not null)`;
  const { app, tables } = receivers(sql, sent);
  const retried = await retryAll(app, sent);
  expect(retried.map((r) => r.status)).toEqual(sent.map(() => 200));
  for (const r of retried) if (r.provider !== "adyen") expect(JSON.parse(r.text)).toMatchObject({ outcome: "duplicate" });
  expect(await sql`select count(*)::int as n from webhook_inbox`).toEqual([{ n: before.length }] as never);
  expect(await sql`select * from handler_runs`).toEqual([] as never);

  // The row queued before the upgrade is applied once, from its payload; the parked one waits for an operator.
  const worked = await workOff(sql, tables.stripe!, { tables });
  expect(worked.map((w) => [w.claim.eventId, w.outcome])).toEqual([["evt_upgrade_queued", "processed"]]);
  expect(await sql`select provider, event_id from handler_runs`).toEqual([{ provider: "stripe", event_id: "evt_upgrade_queued" }] as never);
});

test("from 0026: an event id with two rows (dated twice, or dated and undated) becomes one row, the one that settled it; the other is kept in webhook_inbox_merged_0027; retries are duplicates and nothing runs again (review R1, R2; trial N1)", async () => {
  const sql = await oldDatabase(26);
  const sent = await deliveries();
  for (const s of sent) for (const e of s.events) await oldRow(sql, 26, s, e, "processed");
  const stripe = sent.find((s) => s.provider === "stripe")!;
  const shopify = sent.find((s) => s.provider === "shopify")!;
  const github = sent.find((s) => s.provider === "github")!;
  const event = stripe.events[0]!;
  // N1: the Events API's copy of a delivered event, dated differently by a source: a second processed row.
  await oldRow(sql, 26, stripe, event, "processed", { created: new Date((NOW_SEC - 60) * 1000), source: "api" });
  // R1: a Shopify event written dated by the code before 6c8c70b, then undated by the code after it.
  await oldRow(sql, 26, shopify, shopify.events[0]!, "processed", { created: new Date("2022-01-01T00:00:05Z") });
  // R2: a GitHub push kept dated by 0026's `payload ? 'created'` test, then its redelivery undated, left queued.
  await oldRow(sql, 26, github, github.events[0]!, "unprocessed", { created: new Date((NOW_SEC - 3_600) * 1000) });
  // One id whose rows were parked and queued: the parked one is what an operator must see.
  const other = { ...event, id: "evt_upgrade_twice_open", payload: { ...event.payload, id: "evt_upgrade_twice_open" } };
  await oldRow(sql, 26, stripe, other, "needs_review", { created: new Date((NOW_SEC - 120) * 1000) });
  await oldRow(sql, 26, stripe, other, "unprocessed", { created: new Date((NOW_SEC - 60) * 1000) });
  const [{ n: rowsBefore } = { n: 0 }] = await sql<{ n: number }[]>`select count(*)::int as n from webhook_inbox`;

  expect(await migrate(sql, ALL)).toEqual(ALL.filter((m) => m.version > 26).map((m) => m.name));
  const after = await inboxRows(sql);
  const ids = after.map((r) => `${r.provider}/${r.event_id}`);
  expect(new Set(ids).size).toBe(ids.length);
  expect(after.length + 4).toBe(rowsBefore);
  expect(after.find((r) => r.event_id === event.id)).toMatchObject({ state: "processed", created: Number(event.payload.created) });
  expect(after.find((r) => r.provider === "github")).toMatchObject({ state: "processed" });
  expect(after.find((r) => r.event_id === "evt_upgrade_twice_open")).toMatchObject({ state: "needs_review" });
  const merged = await sql<{ provider: string; event_id: string; source: string; settled: boolean; parked: boolean }[]>`
    select provider, event_id, source, processed_at is not null as settled, needs_review_at is not null as parked
      from webhook_inbox_merged_0027
     order by 1, 2, 3
  `;
  expect(merged.map((m) => [m.provider, m.event_id, m.settled, m.parked])).toEqual([
    ["github", github.events[0]!.id, false, false],
    ["shopify", shopify.events[0]!.id, true, false],
    ["stripe", event.id, true, false],
    ["stripe", "evt_upgrade_twice_open", false, false],
  ]);

  await sql`create table handler_runs (provider text not null, event_id text not null)`;
  const { app, tables } = receivers(sql, sent);
  const retried = await retryAll(app, sent);
  expect(retried.map((r) => r.status)).toEqual(sent.map(() => 200));
  for (const r of retried) if (r.provider !== "adyen") expect(JSON.parse(r.text)).toMatchObject({ outcome: "duplicate" });
  // The queued second rows are gone with their merge: no worker applies an event a second time.
  expect(await workOff(sql, tables.stripe!, { tables })).toEqual([]);
  expect(await sql`select * from handler_runs`).toEqual([] as never);
});
