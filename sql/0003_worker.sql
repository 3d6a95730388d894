-- Async mode (seed §6): rows a worker gave up on are parked for operators (needs-review, the dead
-- letter): after the attempt limit, or at once for a permanent handler error. Parked rows are never
-- claimed again until an operator requeues them.
alter table webhook_inbox
  add column needs_review_at timestamptz;

alter table webhook_inbox
  add constraint webhook_inbox_parked_unprocessed check (needs_review_at is null or processed_at is null);

-- Claimable rows: unprocessed, not parked, oldest due first.
drop index webhook_inbox_unprocessed;
create index webhook_inbox_due
  on webhook_inbox (available_at)
  where processed_at is null and needs_review_at is null;

create index webhook_inbox_needs_review
  on webhook_inbox (needs_review_at)
  where needs_review_at is not null;

-- Jittered exponential backoff (graphile-worker computes it in SQL too): the delay before the next
-- attempt after `attempts` attempts, base · 2^(attempts-1), capped, times a jitter in [0.5, 1).
create function webhook_inbox_backoff(attempts integer, base_ms integer, cap_ms integer)
returns interval
language sql
volatile
as $$
  select make_interval(secs => least(cap_ms::float8, base_ms * power(2::float8, greatest(attempts - 1, 0))) * (0.5 + random() * 0.5) / 1000)
$$;
