-- The inbox: one row per (provider, endpoint, event_id) ever accepted.
-- The primary key is the idempotency key: concurrent duplicates serialize on its unique index
-- (PostgreSQL manual, INSERT "ON CONFLICT Clause"; seed §4).
create table webhook_inbox (
  provider     text        not null,                 -- 'stripe', …: keeps id spaces of providers apart
  endpoint     text        not null,                 -- 'billing', …: the same event to two endpoints is two rows
  event_id     text        not null,                 -- Stripe: evt_…
  event_type   text        not null,
  payload      jsonb       not null check (jsonb_typeof(payload) = 'object'), -- the verified event
  received_at  timestamptz not null default now(),
  available_at timestamptz not null default now(),   -- async mode: when a worker may (re)claim it
  attempts     integer     not null default 0,       -- async mode: counted at claim time, before work
  last_error   text,                                 -- error class and a short message, never the payload
  processed_at timestamptz,                          -- null = not yet processed
  outcome      text        check (outcome in ('processed', 'ignored')), -- set together with processed_at
  primary key (provider, endpoint, event_id),
  check ((processed_at is null) = (outcome is null))
);

-- Workers look only at unprocessed rows, oldest due first.
create index webhook_inbox_unprocessed
  on webhook_inbox (available_at)
  where processed_at is null;

-- Retention deletes processed rows by age.
create index webhook_inbox_processed_at
  on webhook_inbox (processed_at)
  where processed_at is not null;
