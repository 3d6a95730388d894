-- Outbox dispatcher (seed §6, end): side effects outside the database are delivered from `outbox`
-- by dispatchers that claim rows with FOR UPDATE SKIP LOCKED and a lease. Every claim takes a new
-- fencing token from a sequence and stores it on the row; marking the row published (or recording a
-- failure) requires that token, so a dispatcher whose lease expired and whose row was claimed again
-- cannot mark or overwrite it. Existing inserts (aggregate_type, aggregate_id, event_type, payload)
-- keep working: every new column has a default or is nullable.
create sequence outbox_claim_token_seq as bigint;

alter table outbox
  add column available_at    timestamptz not null default now(), -- when a dispatcher may (re)claim it
  add column attempts        integer     not null default 0,     -- counted at claim time, before delivery
  add column claim_token     bigint,                             -- fencing token of the latest claim
  add column last_error      text,                               -- error class and a short message, never the payload
  add column needs_review_at timestamptz,                        -- parked: never claimed again until requeued
  add constraint outbox_parked_unpublished check (needs_review_at is null or published_at is null);

-- Claimable rows: unpublished, not parked, oldest due first.
drop index outbox_unpublished;
create index outbox_due
  on outbox (available_at, id)
  where published_at is null and needs_review_at is null;

-- Ordered dispatch: "is there an earlier unpublished row of this aggregate?" (parked rows included).
create index outbox_pending_by_aggregate
  on outbox (aggregate_type, aggregate_id, id)
  where published_at is null;

create index outbox_needs_review
  on outbox (needs_review_at)
  where needs_review_at is not null;

-- Wake dispatchers when rows are queued, without touching the business handlers that insert them.
-- Once per statement, and only when the statement inserted rows (the billing handler's
-- insert … select inserts none for a duplicate payment). Delivered at commit, never for a rollback.
create function outbox_notify() returns trigger
language plpgsql
as $$
begin
  if exists (select 1 from inserted) then
    perform pg_notify('webhook_outbox', '');
  end if;
  return null;
end
$$;

create trigger outbox_notify
  after insert on outbox
  referencing new table as inserted
  for each statement
  execute function outbox_notify();

-- Provider write-backs (seed §8): the result of a call back to the provider, keyed by the
-- deterministic idempotency key sent with it (`webhook:<event_id>:<operation>`). A row without
-- `completed_at` is a call that was started and may or may not have happened; a completed row
-- means "done, never call again", however long after the provider forgot the key (≥ 24 h at Stripe).
create table provider_writebacks (
  provider        text        not null,                  -- 'stripe'
  idempotency_key text        not null check (length(idempotency_key) between 1 and 255),
  operation       text        not null,                  -- a code constant, e.g. 'update-customer-metadata'
  event_id        text        not null,                  -- the provider event the call answers
  result_id       text,                                  -- the object the call created or changed
  result          jsonb       check (result is null or jsonb_typeof(result) = 'object'), -- what the caller chose to keep
  created_at      timestamptz not null default now(),    -- first attempt started (before the first call)
  completed_at    timestamptz,
  primary key (provider, idempotency_key),
  check ((completed_at is null) = (result_id is null))
);
