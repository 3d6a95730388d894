-- A signed event holding what jsonb refuses in a string or key (a \u0000 escape, a lone surrogate
-- escape) is stored and processed like any other from a copy with those escapes replaced by U+FFFD;
-- its exact verified body is kept next to it in raw_body, and payload_sanitized says what was
-- replaced (null: the payload is the body as received). What no replacement fixes (a number beyond
-- numeric's range, nesting too deep) is still parked with raw_body only (0006).
alter table webhook_inbox
  add column payload_sanitized text,
  drop constraint webhook_inbox_payload_kept_dropped_or_raw,
  add constraint webhook_inbox_payload_kept_dropped_or_raw
    check ((payload is null) = (payload_dropped_at is not null or (raw_body is not null and payload_sanitized is null))),
  -- A sanitized copy is processed like any payload, so its raw body may belong to a settled row.
  drop constraint webhook_inbox_raw_body_parked,
  add constraint webhook_inbox_raw_body_parked
    check (raw_body is null or payload_sanitized is not null or (payload is null and (processed_at is null or outcome = 'resolved'))),
  -- The exact bytes stay with the copy until retention drops both (purge --payloads-older-than).
  add constraint webhook_inbox_sanitized_keeps_raw_body
    check (payload_sanitized is null or raw_body is not null or payload_dropped_at is not null);
