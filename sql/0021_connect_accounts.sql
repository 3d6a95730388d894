-- Stripe Connect: events of connected accounts, and live/test mode kept apart (docs/stripe-connect.md).
--
-- 1. The account an event belongs to: its `account` (classic events) or `context` (thin notifications),
--    '' for the platform's own. Stripe event ids are unique across accounts, so the inbox key stays
--    (provider, endpoint, event_id); the account is recorded next to it and handed to handlers.
-- 2. outcome 'ignored_mode': an event whose livemode differs from its endpoint's mode (a Connect
--    endpoint receives both modes with one secret). Settled at once, never applied, kept so it is
--    counted per endpoint and a redelivery stays a duplicate.
-- 3. Every business table carries the account, and every business key includes it, so the same
--    invoice, charge, refund or dispute id under two accounts never collides or mixes. Existing rows
--    are the platform's (''): adding a column with a constant default rewrites nothing (PostgreSQL
--    manual, ALTER TABLE "Notes").
-- 4. Event backfill's checkpoint is kept per (provider, endpoint, account); existing rows are the
--    platform's.
alter table webhook_inbox
  add column account text not null default '',
  drop constraint webhook_inbox_outcome_check,
  add constraint webhook_inbox_outcome_check
    check (outcome in ('processed', 'ignored', 'resolved', 'object_missing', 'ignored_mode'));

-- The views over the ledger are rebuilt below with the account.
drop view invoice_net;
drop view ledger_entries_linked;

alter table invoices add column account text not null default '';
alter table ledger_entries add column account text not null default '';
alter table stripe_charges add column account text not null default '';
alter table invoice_payments add column account text not null default '';
alter table refunds add column account text not null default '';
alter table disputes add column account text not null default '';
alter table outbox add column account text not null default '';
alter table stripe_change_claims add column account text not null default '';

-- invoices: the key is (account, id); the payment rows of ledger_entries refer to it.
alter table ledger_entries drop constraint ledger_entries_invoice_id_fkey;
alter table invoices drop constraint invoices_pkey, add primary key (account, id);
alter table ledger_entries
  add constraint ledger_entries_invoice_fkey foreign key (account, invoice_id) references invoices (account, id),
  drop constraint ledger_entries_invoice_id_kind_key,
  add constraint ledger_entries_invoice_id_kind_key unique (account, invoice_id, kind);
drop index ledger_entries_balance_transaction_kind_key;
create unique index ledger_entries_balance_transaction_kind_key
  on ledger_entries (account, balance_transaction, kind) where kind <> 'payment';
drop index ledger_entries_one_booking_per_refund;
create unique index ledger_entries_one_booking_per_refund on ledger_entries (account, source_id) where kind = 'refund';
drop index ledger_entries_one_reversal_per_refund;
create unique index ledger_entries_one_reversal_per_refund on ledger_entries (account, source_id) where kind = 'refund_reversal';

alter table stripe_charges drop constraint stripe_charges_pkey, add primary key (account, id);
drop index stripe_charges_payment_intent;
create index stripe_charges_payment_intent on stripe_charges (account, payment_intent);

alter table invoice_payments drop constraint invoice_payments_pkey, add primary key (account, id);
drop index invoice_payments_payment_intent;
drop index invoice_payments_charge;
create index invoice_payments_payment_intent on invoice_payments (account, payment_intent);
create index invoice_payments_charge on invoice_payments (account, charge);

alter table refunds drop constraint refunds_pkey, add primary key (account, id);
drop index refunds_charge;
drop index refunds_payment_intent;
create index refunds_charge on refunds (account, charge);
create index refunds_payment_intent on refunds (account, payment_intent);

alter table disputes drop constraint disputes_pkey, add primary key (account, id);

alter table stripe_change_claims drop constraint stripe_change_claims_pkey, add primary key (account, change_id);

-- Ordered dispatch looks for an earlier unpublished row of the same aggregate of the same account.
drop index outbox_pending_by_aggregate;
create index outbox_pending_by_aggregate
  on outbox (account, aggregate_type, aggregate_id, id)
  where published_at is null;

alter table event_backfill_checkpoints
  add column account text not null default '',
  drop constraint event_backfill_checkpoints_pkey,
  add primary key (provider, endpoint, account);

-- The views of 0020, every link and sum inside one account.
create view ledger_entries_linked as
select l.id, l.kind, l.amount, l.currency, l.balance_transaction, l.payment_intent, l.charge, l.source_id,
       l.event_id, l.booked_at,
       coalesce(l.invoice_id, (
         select ip.invoice_id
           from invoice_payments ip
          where ip.account = l.account
            and (ip.payment_intent = coalesce(l.payment_intent, c.payment_intent)
                 or ip.charge = l.charge)
          order by ip.invoice_id
          limit 1
       )) as invoice_id,
       l.settlement_amount, l.settlement_currency, l.account
  from ledger_entries l
  left join stripe_charges c on c.account = l.account and c.id = l.charge;

create view invoice_net as
select invoice_id, currency,
       coalesce(sum(amount) filter (where kind = 'payment'), 0) as paid,
       coalesce(sum(amount) filter (where kind = 'refund'), 0) as refunded,
       coalesce(sum(amount) filter (where kind = 'refund_reversal'), 0) as refunds_reversed,
       coalesce(sum(amount) filter (where kind = 'dispute_withdrawal'), 0) as dispute_withdrawn,
       coalesce(sum(amount) filter (where kind = 'dispute_fee'), 0) as dispute_fees,
       coalesce(sum(amount) filter (where kind = 'dispute_fee_reversal'), 0) as dispute_fees_returned,
       coalesce(sum(amount) filter (where kind = 'dispute_reinstatement'), 0) as dispute_reinstated,
       sum(case when kind in ('payment', 'refund_reversal', 'dispute_fee_reversal', 'dispute_reinstatement') then amount
                else -amount end) as net,
       account
  from ledger_entries_linked
 group by account, invoice_id, currency;
