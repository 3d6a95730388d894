-- Checkout fulfilment, subscriptions and invoice dunning (src/handlers/checkout.ts, subscriptions.ts,
-- dunning.ts). New tables carry the Stripe account (`''` = the platform's own, else `acct_…`) in every
-- business key, so the same object id under two connected accounts never collides.

-- One row per Checkout Session seen. `state` only moves up its rank (checkout.ts):
-- open 0 < awaiting_payment 1 < payment_failed 2 = expired 2 < fulfilled 3.
create table checkout_sessions (
  account        text        not null default '',
  id             text        not null,                 -- cs_…
  state          text        not null check (state in ('open', 'awaiting_payment', 'payment_failed', 'expired', 'fulfilled')),
  mode           text,                                 -- payment | subscription | setup
  payment_status text        not null,                 -- Stripe's payment_status as last applied
  amount_total   bigint      check (amount_total >= 0), -- minor units; null for a setup session
  currency       text,
  customer_id    text,
  event_id       text        not null,                 -- the event that last moved it
  created_at     timestamptz not null default now(),
  updated_at     timestamptz not null default now(),
  primary key (account, id)
);

-- Business-key idempotency: a session is fulfilled once, whichever event said it was paid.
create table checkout_fulfilments (
  account      text        not null default '',
  session_id   text        not null,                   -- cs_…
  amount_total bigint,
  currency     text,
  event_id     text        not null,                   -- the event whose transaction fulfilled it
  fulfilled_at timestamptz not null default now(),
  primary key (account, session_id)
);

-- One row per subscription. (as_of, rank) orders the states applied (subscriptions.ts): a state is
-- applied only when its key is at least the stored one; canceled and incomplete_expired are final.
create table subscriptions (
  account              text        not null default '',
  id                   text        not null,           -- sub_…
  customer_id          text        not null,
  status               text        not null check (status in ('incomplete', 'incomplete_expired', 'trialing', 'active', 'past_due', 'canceled', 'unpaid', 'paused')),
  has_access           boolean     not null,           -- trialing, active or past_due
  current_period_start timestamptz,
  current_period_end   timestamptz,
  cancel_at_period_end boolean     not null default false,
  canceled_at          timestamptz,
  ended_at             timestamptz,
  trial_end            timestamptz,
  as_of                numeric     not null,           -- Unix s: the event's created, or the API read's time
  status_rank          integer     not null,
  event_id             text        not null,           -- the event that last moved it
  created_at           timestamptz not null default now(),
  updated_at           timestamptz not null default now(),
  primary key (account, id)
);

-- Dunning on the invoice Stripe is collecting (billing.ts keeps the invoice): failed attempts are
-- recorded here and never book money; the payment that moves the invoice to paid clears `dunning`.
alter table invoices
  add column subscription_id      text,                -- sub_… the invoice bills, when it says
  add column attempt_count        integer not null default 0 check (attempt_count >= 0),
  add column next_payment_attempt timestamptz,
  add column dunning              text check (dunning in ('payment_failed', 'action_required'));
