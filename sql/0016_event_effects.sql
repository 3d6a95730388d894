-- The operator's page (and status and /metrics) stay fast with a million inbox rows.

-- Open rows (unprocessed and needs-review), newest first for the page's state filters, and counted
-- per endpoint by the backlog without reading settled rows (the partial indexes of 0003 each hold
-- one kind, so the backlog query scanned the table). A sync delivery inserts its row settled, so
-- the hot path adds no entry here.
create index webhook_inbox_open
  on webhook_inbox (received_at, needs_review_at, provider, endpoint)
  where processed_at is null;

-- What an event changed: its ledger entries and outbox messages, by index rather than a scan of
-- tables that grow with every payment.
create index ledger_entries_event_id
  on ledger_entries (event_id);

create index outbox_event_id
  on outbox ((payload ->> 'event_id'));
