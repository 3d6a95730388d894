-- Retention (seed §9): payloads may be dropped after a short period while the dedup key and the
-- metadata stay until the row itself is purged. A dropped payload is null with payload_dropped_at set.
alter table webhook_inbox
  alter column payload drop not null,
  add column payload_dropped_at timestamptz,
  add constraint webhook_inbox_payload_kept_or_dropped
    check ((payload is null) = (payload_dropped_at is not null)),
  add constraint webhook_inbox_payload_dropped_only_when_processed
    check (payload_dropped_at is null or processed_at is not null);

-- Status and metrics count recent arrivals by endpoint and type.
create index webhook_inbox_received_at
  on webhook_inbox (received_at);

-- One definition of a row's state, for the operator commands and metrics.
create view webhook_inbox_state as
select provider, endpoint, event_id, event_type, received_at, available_at, attempts, last_error,
       processed_at, outcome, needs_review_at, payload_dropped_at,
       case
         when processed_at is not null then outcome            -- 'processed' | 'ignored'
         when needs_review_at is not null then 'needs_review'
         else 'unprocessed'
       end as state
  from webhook_inbox;
