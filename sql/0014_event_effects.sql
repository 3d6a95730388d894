-- The operator's page shows what an event changed and pages through the inbox by keyset:
-- the ledger entries and outbox messages of one event are found by index, not by a scan of tables
-- that grow with every payment.
create index ledger_entries_event_id
  on ledger_entries (event_id);

create index outbox_event_id
  on outbox ((payload ->> 'event_id'));
