// Shared by the backfill tests: fixture events made recent, a fake Stripe holding them, a run.
import type { Db } from "../../src/db/db.ts";
import { startFakeStripe, type RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore, type StoredObject } from "../../src/dev/fake-stripe/store.ts";
import { backfillEvents, type BackfillOptions, type BackfillSummary } from "../../src/reconcile/backfill-events.ts";
import { stripeEventLister, type EventFilters } from "../../src/reconcile/stripe-events.ts";
import { handlersFor } from "../../src/receiver/endpoints.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { readFixtures } from "../support/helpers.ts";

export const API_KEY = "sk_test_backfillbackfill1";

/**
 * The invoice lifecycle and money-out fixtures as Stripe's API would hold them: `created` moved to
 * `baseSec` + 0, 0, 1, 1, 2, … (two events per second, so pages split seconds), in file order.
 */
export function recentEvents(baseSec: number, sets = ["stripe/invoice-lifecycle", "stripe/money-out"]): StoredObject[] {
  const bodies = sets.flatMap((s) => readFixtures(s).map((f) => f.body));
  return bodies.map((body, i) => ({ ...(JSON.parse(body) as StoredObject), created: baseSec + Math.floor(i / 2) }));
}

/** A fake Stripe with `events` (undelivered unless `delivered`). */
export function fakeWith(events: readonly StoredObject[], delivered = false): RunningFakeStripe {
  const store = new FakeStripeStore(API_KEY);
  for (const e of events) store.putEvent(e, delivered);
  return startFakeStripe({ store });
}

/** One backfill run of the `billing` endpoint against `fake`, retries without waiting. */
export function runBackfill(
  db: Db,
  fake: RunningFakeStripe,
  options: Partial<BackfillOptions> & { mode?: Mode; filters?: EventFilters } = {},
): Promise<BackfillSummary> {
  const stripe = stripeApiClient({ apiKey: API_KEY, apiBase: new URL(fake.url) });
  return backfillEvents({
    db,
    list: stripeEventLister(stripe, options.filters ?? {}, { sleep: async () => {} }),
    target: { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! },
    mode: options.mode ?? "sync",
    backoff: { baseMs: 1_000, capMs: 600_000 },
    owner: `test ${crypto.randomUUID()}`,
    ...options,
  });
}

/** The billing end state the fixtures lead to: invoices, ledger rows per kind, outbox rows. */
export async function endState(db: Db) {
  return {
    invoices: await db`select id, status, amount_paid from invoices order by id`,
    ledger: await db`select kind, amount, balance_transaction from ledger_entries order by kind, amount, balance_transaction`,
    outbox: (await db`select count(*)::int as n from outbox`)[0]!.n as number,
  };
}
