-- A signed event whose JSON PostgreSQL cannot store as jsonb (a \u0000 escape, a lone surrogate, a
-- number out of range, nesting too deep) is still never lost: it is kept as needs-review with its
-- exact verified body as text, and no payload.
alter table webhook_inbox
  add column raw_body text,
  drop constraint webhook_inbox_payload_kept_or_dropped,
  add constraint webhook_inbox_payload_kept_dropped_or_raw
    check ((payload is null) = (payload_dropped_at is not null or raw_body is not null)),
  add constraint webhook_inbox_raw_body_parked
    check (raw_body is null or (payload is null and processed_at is null));
