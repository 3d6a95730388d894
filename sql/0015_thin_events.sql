-- Stripe thin events (Event Destinations) and refetch mode.
-- 1. stripe_change_claims: one row per Stripe change applied, keyed by the classic (snapshot) event id.
--    A classic event claims its own id; a thin event claims its snapshot_event (or its own id when it has
--    none). Handlers of the Stripe table insert the claim in their own transaction and apply nothing when
--    it is already there, so a classic and a thin event for one change apply once, in any order (the
--    unique key serializes concurrent ones like the inbox key does).
-- 2. webhook_inbox.outcome 'object_missing': a thin event (or a refetched classic one) whose object Stripe
--    no longer has (404 resource_missing) is settled with this outcome instead of retried.
-- 3. event_backfill_requests: windows Stripe reported it failed to create events for
--    (v2.core.health.event_generation_failure.resolved), recorded with the settled notification so the
--    event backfill runs for each window once.
create table stripe_change_claims (
  change_id  text        primary key,          -- the classic event id (evt_…) of the change
  provider   text        not null,             -- the inbox row that applied it
  endpoint   text        not null,
  event_id   text        not null,
  claimed_at timestamptz not null default now()
);

alter table webhook_inbox
  drop constraint webhook_inbox_outcome_check,
  add constraint webhook_inbox_outcome_check
    check (outcome in ('processed', 'ignored', 'resolved', 'object_missing'));

create table event_backfill_requests (
  id                 bigint generated always as identity primary key,
  endpoint           text        not null,     -- the thin endpoint the health notification came to
  requested_by       text        not null unique, -- the notification's event id: one request per notification
  window_start       timestamptz not null,
  window_end         timestamptz not null,
  requested_at       timestamptz not null default now(),
  started_at         timestamptz,              -- set when a backfill run takes the request (taken again if it never finishes)
  finished_at        timestamptz,              -- set when that run has backfilled the whole window
  check (window_start <= window_end)
);
