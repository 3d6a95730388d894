-- Operators close needs-review rows they settled by hand (`bun run inbox resolve`): the row becomes
-- settled with outcome 'resolved' and the operator's note, so it leaves the needs-review backlog (and
-- its alert), a redelivery is still a duplicate, and retention purges it like any settled row.
-- last_error stays as the record of why it was parked; needs_review_at is cleared (0003: a parked row
-- is never settled), processed_at is when it was resolved.
alter table webhook_inbox
  drop constraint webhook_inbox_outcome_check,
  add constraint webhook_inbox_outcome_check
    check (outcome in ('processed', 'ignored', 'resolved')),
  add column resolution_note text,
  add constraint webhook_inbox_resolution_noted
    check ((outcome = 'resolved') = (resolution_note is not null)),
  -- A raw body (an event jsonb could not hold) may now belong to a resolved row too.
  drop constraint webhook_inbox_raw_body_parked,
  add constraint webhook_inbox_raw_body_parked
    check (raw_body is null or (payload is null and (processed_at is null or outcome = 'resolved')));

create or replace view webhook_inbox_state as
select provider, endpoint, event_id, event_type, received_at, available_at, attempts, last_error,
       processed_at, outcome, needs_review_at, payload_dropped_at,
       case
         when processed_at is not null then outcome            -- 'processed' | 'ignored' | 'resolved'
         when needs_review_at is not null then 'needs_review'
         else 'unprocessed'
       end as state,
       resolution_note
  from webhook_inbox;
