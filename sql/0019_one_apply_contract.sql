-- One contract for applying an event: a handler is a plain function inside the inbox transaction, so
-- the gate of one-statement handlers (0012) goes; retention and deferrals get the columns they need.

-- 1. Handlers run only after the inbox insert (or the worker's FOR UPDATE re-check) found work: the
--    statement-level gate that refused a step writing for a duplicate has nothing left to guard.
drop function webhook_inbox_ungated();

-- 2. The event's own creation time (Stripe: `created`), the clock retention is measured on: Stripe
--    redelivers for 3 days after it created an event, and event backfill re-reads 30 days of it. Read
--    from each stored Stripe payload that has it, else the arrival time.
alter table webhook_inbox
  add column event_created_at timestamptz;

update webhook_inbox
   set event_created_at = case
         when jsonb_typeof(payload -> 'created') = 'number' then to_timestamp((payload ->> 'created')::float8)
         else received_at
       end;

alter table webhook_inbox
  alter column event_created_at set default now(),
  alter column event_created_at set not null;

-- Purge deletes settled rows by the event's creation time.
create index webhook_inbox_settled_created
  on webhook_inbox (event_created_at)
  where processed_at is not null;

-- 3. A thin or refetch row whose Stripe API read failed is deferred without using an attempt; deferrals
--    are counted so their backoff grows and the row is parked after a bound (worker/process-claim.ts).
alter table webhook_inbox
  add column defers integer not null default 0;

-- 4. Retention of the inbox's companions: published outbox messages, change claims and finished
--    backfill requests are deleted by age with the inbox rows (ops/purge.ts).
create index outbox_published_at
  on outbox (published_at)
  where published_at is not null;

create index stripe_change_claims_claimed_at
  on stripe_change_claims (claimed_at);

create index event_backfill_requests_finished_at
  on event_backfill_requests (finished_at)
  where finished_at is not null;
