// The 30-day edge of Stripe's Events API, and the checkpoint's age where operators look.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";

setDefaultTimeout(60_000);
import type { Db } from "../../src/db/db.ts";
import type { RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { inboxStatus } from "../../src/ops/status.ts";
import { summaryLines } from "../../src/reconcile/events-command.ts";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { freshDatabase, SECRET } from "../support/helpers.ts";
import { fakeWith, recentEvents, runBackfill } from "./backfill-support.ts";

const DAY = 86_400;
const NOW = Math.floor(Date.now() / 1000);
const fakes: RunningFakeStripe[] = [];
let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;

beforeEach(async () => {
  await database?.drop();
  database = await freshDatabase();
  db = database.db;
});
afterAll(async () => {
  await database?.drop();
  await Promise.all(fakes.map((f) => f.stop()));
});

/** Lifecycle events 40 days old (gone from the API) and money-out events 10 days old, in a fake that keeps 30 days. */
function thirtyDayFake() {
  const gone = recentEvents(NOW - 40 * DAY, ["stripe/invoice-lifecycle"]);
  const held = recentEvents(NOW - 10 * DAY, ["stripe/money-out"]);
  const f = fakeWith([...gone, ...held]);
  f.store.eventRetentionSec = 30 * DAY;
  fakes.push(f);
  return { f, gone, held };
}

test("`backfillEvents()` over a window older than Stripe's 30 days names the interval it cannot backfill and records the rest", async () => {
  const { f, held } = thirtyDayFake();
  const summary = await runBackfill(db, f, { since: new Date((NOW - 45 * DAY) * 1000), now: () => NOW * 1000 });
  expect(summary.unrecoverable).toEqual({
    from: new Date((NOW - 45 * DAY) * 1000).toISOString(),
    to: new Date((NOW - 30 * DAY) * 1000).toISOString(),
  });
  expect(summary.fresh).toBe(held.length);
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(held.length);
  const text = summaryLines(summary).join("\n");
  expect(text).toContain(`from ${summary.unrecoverable!.from} to ${summary.unrecoverable!.to} can no longer be backfilled`);
  expect(text).toContain(`bun run reconcile invoices --since ${summary.unrecoverable!.from}`);
  // The checkpoint moves past the reported interval, so the next run is current.
  const [cp] = await db`select covered_until from event_backfill_checkpoints`;
  expect((cp!.covered_until as Date).getTime()).toBe(NOW * 1000);
});

test("`backfillEvents()` from a checkpoint older than 30 days reports the lost interval from where the checkpoint stopped", async () => {
  const { f, gone, held } = thirtyDayFake();
  await db`
    insert into event_backfill_checkpoints (provider, endpoint, cursor_event_id, cursor_created, covered_until)
    values ('stripe', 'billing', ${gone[3]!.id}, to_timestamp(${gone[3]!.created}), to_timestamp(${gone[3]!.created}))
  `;
  const summary = await runBackfill(db, f, { now: () => NOW * 1000 });
  expect(summary.unrecoverable?.from).toBe(new Date(gone[3]!.created * 1000).toISOString());
  expect(summary.unrecoverable?.to).toBe(new Date((NOW - 30 * DAY) * 1000).toISOString());
  expect(summary.fresh).toBe(held.length);
});

test("`backfillEvents()` within 30 days starts after the newest older event and reports nothing lost", async () => {
  const { f, held } = thirtyDayFake();
  const summary = await runBackfill(db, f, { since: new Date((NOW - 10 * DAY + 5) * 1000), now: () => NOW * 1000 });
  expect(summary.unrecoverable).toBeNull();
  // Events of the seconds before `since` are left out; the first page starts at the anchor before it.
  expect(summary.fresh).toBe(held.filter((e) => e.created >= NOW - 10 * DAY + 5).length);
  expect(f.store.requests.some((r) => r.query["created[lt]"] !== undefined && r.query.limit === "1")).toBe(true);
});

test("`inboxStatus()` and `/metrics` show the backfill checkpoint's age per endpoint", async () => {
  const { f } = thirtyDayFake();
  await runBackfill(db, f);
  await db`update event_backfill_checkpoints set covered_until = now() - interval '2 days'`;
  const status = await inboxStatus(db);
  expect(status.backfill.map((b) => [b.endpoint, Math.round(b.ageSec / 3600)])).toEqual([["billing", 48]]);
  const app = createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]) });
  const text = await (await app.fetch(new Request("http://x/metrics"))).text();
  const line = text.split("\n").find((l) => l.startsWith('webhook_backfill_checkpoint_age_seconds{provider="stripe",endpoint="billing"}'));
  expect(Math.round(Number(line?.split(" ")[1]) / 3600)).toBe(48);
});
