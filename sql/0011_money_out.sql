-- Money going out (refunds, disputes) next to the payments of 0002. Every money movement Stripe made
-- carries a balance transaction id (txn_…): it is the business key of a money-out ledger row, so any
-- order and any number of deliveries book each movement once. One balance transaction can carry two
-- movements (a dispute's withdrawal and its fee), hence the key (balance_transaction, kind).
--
-- Sign convention: `amount` is always ≥ 0 in minor units of `currency`; the kind gives the direction.
-- net = payment − refund − dispute_withdrawal − dispute_fee + dispute_reinstatement.
--
-- Links to invoices are facts stored as they arrive (invoice ↔ payment intent from invoice_payment.paid,
-- charge ↔ payment intent from charges and refunds) and derived at read time by the view
-- ledger_entries_linked: no row is ever updated when a later link arrives, so arrival order cannot
-- change the result. A money-out row never carries invoice_id itself, which keeps the
-- one-payment-per-invoice key of 0002, unique (invoice_id, kind), for payments only.
alter table ledger_entries
  alter column invoice_id drop not null,
  drop constraint ledger_entries_kind_check,
  add constraint ledger_entries_kind_check
    check (kind in ('payment', 'refund', 'dispute_withdrawal', 'dispute_fee', 'dispute_reinstatement')),
  add column balance_transaction text,                  -- txn_…: the money movement; null for payments
  add column payment_intent text,                       -- pi_… the money-out row refers to, when the event says
  add column charge text,                               -- ch_… the money-out row refers to, when the event says
  add column source_id text,                            -- re_… or dp_…: the refund or dispute that moved it
  add constraint ledger_entries_payment_keyed_by_invoice
    check ((kind = 'payment') = (invoice_id is not null)),
  add constraint ledger_entries_money_out_keyed_by_txn
    check ((kind = 'payment') = (balance_transaction is null)),
  add constraint ledger_entries_balance_transaction_kind_key unique (balance_transaction, kind);

-- Charges seen in charge.* events: the charge ↔ payment intent link, and what a refund may not exceed.
create table stripe_charges (
  id             text        primary key,               -- ch_…
  payment_intent text,                                  -- pi_…; null for a charge made without one
  amount         bigint      not null check (amount >= 0), -- captured minor units
  currency       text        not null,
  event_id       text        not null,                  -- the first event that carried it
  created_at     timestamptz not null default now()
);

-- invoice_payment.paid: which payment (intent or charge) paid which invoice.
create table invoice_payments (
  id             text        primary key,               -- inpay_…
  invoice_id     text        not null,
  payment_intent text,
  charge         text,
  amount_paid    bigint      not null check (amount_paid >= 0),
  currency       text        not null,
  event_id       text        not null,
  created_at     timestamptz not null default now(),
  check (payment_intent is not null or charge is not null)
);
create index invoice_payments_payment_intent on invoice_payments (payment_intent);
create index invoice_payments_charge on invoice_payments (charge);

-- Refund status moves forward only: pending/requires_action → succeeded → failed/canceled.
create table refunds (
  id                          text        primary key,  -- re_…
  charge                      text,
  payment_intent              text,
  amount                      bigint      not null check (amount >= 0),
  currency                    text        not null,
  status                      text        not null
    check (status in ('pending', 'requires_action', 'succeeded', 'failed', 'canceled')),
  status_rank                 smallint    not null,     -- order of `status` in the lifecycle above
  balance_transaction         text,
  updated_at                  timestamptz not null default now()
);

-- Dispute status moves forward only: warning_needs_response → warning_under_review → needs_response
-- → under_review → a final status (won, lost, warning_closed, prevented), which never changes.
create table disputes (
  id             text        primary key,               -- dp_…
  charge         text        not null,
  payment_intent text,
  amount         bigint      not null check (amount >= 0),
  currency       text        not null,
  status         text        not null
    check (status in ('warning_needs_response', 'warning_under_review', 'warning_closed', 'needs_response', 'under_review', 'won', 'lost', 'prevented')),
  status_rank    smallint    not null,
  updated_at     timestamptz not null default now()
);

-- Every ledger row with the invoice it belongs to, derived from the stored links: a payment names its
-- invoice; a money-out row reaches it through its payment intent (its own, or its charge's) or its
-- charge. null: not linked (yet).
create view ledger_entries_linked as
select l.id, l.kind, l.amount, l.currency, l.balance_transaction, l.payment_intent, l.charge, l.source_id,
       l.event_id, l.booked_at,
       coalesce(l.invoice_id, (
         select ip.invoice_id
           from invoice_payments ip
          where ip.payment_intent = coalesce(l.payment_intent, c.payment_intent)
             or ip.charge = l.charge
          order by ip.invoice_id
          limit 1
       )) as invoice_id
  from ledger_entries l
  left join stripe_charges c on c.id = l.charge;

-- Net money per invoice and currency (the sign convention above); invoice_id null: not linked.
create view invoice_net as
select invoice_id, currency,
       coalesce(sum(amount) filter (where kind = 'payment'), 0) as paid,
       coalesce(sum(amount) filter (where kind = 'refund'), 0) as refunded,
       coalesce(sum(amount) filter (where kind = 'dispute_withdrawal'), 0) as dispute_withdrawn,
       coalesce(sum(amount) filter (where kind = 'dispute_fee'), 0) as dispute_fees,
       coalesce(sum(amount) filter (where kind = 'dispute_reinstatement'), 0) as dispute_reinstated,
       sum(case when kind in ('payment', 'dispute_reinstatement') then amount else -amount end) as net
  from ledger_entries_linked
 group by invoice_id, currency;
