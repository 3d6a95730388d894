-- How far event backfill (`bun run reconcile events`, the catch-up in serve/worker) got, per endpoint,
-- and who may advance it. Stripe lists events newest first; backfill reads them oldest first with
-- `ending_before`, one page per transaction, and moves the cursor in that page's transaction, so a
-- run killed at any moment resumes after the last committed page: no gap, and a page read twice is
-- recorded once (the inbox key).
create table event_backfill_checkpoints (
  provider           text        not null,
  endpoint           text        not null,
  -- Newest event recorded by backfill (Stripe's `ending_before` cursor for the next page) and its
  -- `created`; null before the first page.
  cursor_event_id    text,
  cursor_created     timestamptz,
  -- Every event Stripe listed as created before this moment is in the inbox: the cursor's `created`
  -- after a page, the time the list was first read once a run reached the newest event. Its age is
  -- what `inbox status` and /metrics report. Null before the first complete page.
  covered_until      timestamptz,
  -- A lease, so only one process backfills an endpoint at a time (pooler-safe, unlike a session
  -- advisory lock): held by `lease_owner` until `lease_until`, renewed by every page, and checked in
  -- each page's transaction (a process that lost it commits nothing).
  lease_owner        text,
  lease_until        timestamptz,
  updated_at         timestamptz not null default now(),
  primary key (provider, endpoint)
);
