-- Billing state fed by Stripe invoice events (seed §4, §5.2).
-- Amounts are bigint minor currency units (cents for usd), as Stripe sends them.
create table invoices (
  id          text        primary key,                -- in_…
  customer_id text        not null,                   -- cus_…
  status      text        not null check (status in ('draft', 'open', 'uncollectible', 'paid', 'void')),
  currency    text        not null,                   -- ISO 4217, lowercase as Stripe sends it
  amount_due  bigint      not null default 0,
  amount_paid bigint      not null default 0,
  paid_at     timestamptz,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now()
);

-- Business-key idempotency: one payment per invoice, whichever Event object carried it.
create table ledger_entries (
  id         bigint      generated always as identity primary key,
  invoice_id text        not null references invoices (id),
  kind       text        not null check (kind in ('payment')),
  amount     bigint      not null check (amount >= 0),
  currency   text        not null,
  event_id   text        not null,                    -- the event whose transaction booked it
  booked_at  timestamptz not null default now(),
  unique (invoice_id, kind)
);

-- Transactional outbox: notifications for downstream systems, written in the same transaction
-- as the business change they announce.
create table outbox (
  id             bigint      generated always as identity primary key,
  aggregate_type text        not null,
  aggregate_id   text        not null,
  event_type     text        not null,
  payload        jsonb       not null check (jsonb_typeof(payload) = 'object'),
  created_at     timestamptz not null default now(),
  published_at   timestamptz
);

create index outbox_unpublished
  on outbox (id)
  where published_at is null;
