import type { FakeStripeStore } from "../fake-stripe/store.ts";
import type { StormEvent } from "./model.ts";

/**
 * Gives the storm's events the `created` Stripe gave them, ten per second in creation order (`seq`) ending a
 * moment ago (inside the 30 days its Events API keeps them; the model's fixed `created` is older), and, with
 * `account`, a connected account's `account` field (Stripe docs, "Connect webhooks"): the webhook body and
 * the Events API then carry the same event, as Stripe's do, so a backfilled event meets its delivered
 * row's key. Rewrites each body in place.
 */
export function stampStorm(events: StormEvent[], account?: string): void {
  const firstCreated = Math.floor(Date.now() / 1000) - Math.ceil(events.length / 10) - 1;
  for (const e of events) {
    const event = JSON.parse(e.body) as Record<string, unknown>;
    event.created = firstCreated + Math.floor((e.seq ?? 0) / 10);
    if (account !== undefined) event.account = account;
    e.body = JSON.stringify(event, null, 2);
  }
}

/**
 * Lists every event in the fake Stripe API as Stripe created it before delivering it: under `account` (its
 * `Stripe-Account` view) when given, else the platform's. A thin notification's ISO 8601 `created` is
 * stored as Unix seconds, as the store keeps them.
 */
export function listStorm(store: FakeStripeStore, events: readonly StormEvent[], account = ""): void {
  for (const e of events) {
    const event = JSON.parse(e.body) as { id: string; object: string; created: number | string };
    const created = typeof event.created === "number" ? event.created : Math.floor(Date.parse(event.created) / 1000);
    store.putEvent({ ...event, created }, true, account);
  }
}
