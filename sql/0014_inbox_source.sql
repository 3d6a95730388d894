-- Where an inbox row came from: a signed webhook delivery, Stripe's API (event backfill, thin-event
-- fetches), or object reconciliation (a repair recorded under a key of its own). Operators see it;
-- nothing branches on it for idempotency: the key stays (provider, endpoint, event_id) whichever way
-- the event arrived, so an event received both ways is applied once.
-- Adding a column with a constant default rewrites nothing (PostgreSQL manual, ALTER TABLE "Notes").
alter table webhook_inbox
  add column source text not null default 'webhook'
    check (source in ('webhook', 'api', 'reconcile'));
