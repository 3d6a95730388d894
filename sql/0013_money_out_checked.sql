-- A refund is booked at most once, whatever balance transaction a later event names: the refund id is
-- a business key of its ledger row next to (balance_transaction, kind). The handlers refuse a second
-- transaction first (needs-review); this index holds even if a handler did not.
create unique index ledger_entries_one_booking_per_refund on ledger_entries (source_id) where kind = 'refund';

-- Refunds waiting for their charge or invoice payment are looked up by either.
create index refunds_charge on refunds (charge);
create index refunds_payment_intent on refunds (payment_intent);
create index stripe_charges_payment_intent on stripe_charges (payment_intent);
