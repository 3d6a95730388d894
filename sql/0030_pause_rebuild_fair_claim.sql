-- Issue 37, operating a payment stream on a bad day: pause and hold, rebuild after a handler fix, and a
-- worker's claim that is fair between connected accounts (docs/operations.md, "A bad day").

-- 1. Pauses. While a row names an endpoint (and, unless `account` is '', one connected account), its
--    events are still verified, recorded and answered 2xx, and nothing of them is applied: the receiver
--    records them for the worker, the worker claims none of them, replay and rebuild refuse them
--    (src/ops/pause.ts). `account` '' pauses every event of the endpoint, the platform's own included;
--    `acct_…` one connected account's. Keyed by the endpoint's name as `--endpoint` gives it (every
--    provider's rows at that name, like the other `inbox` filters). Deleting the row is `resume`.
create table endpoint_pauses (
  endpoint   text        not null,
  account    text        not null default '',
  paused_at  timestamptz not null default now(),
  note       text,
  primary key (endpoint, account),
  constraint endpoint_pauses_account check (account = '' or account like 'acct\_%')
);

-- 2. Rebuilds (`inbox rebuild`): one row per run over a window of recorded events, its cursor moved in
--    the transaction that replays each event, so a run stopped at any moment (Ctrl-C, a crash, a kill)
--    continues after the last event it committed. `args` is the command line's scope as given (its
--    `since` may be a duration: the window is resolved once, at the first start, into since_at and
--    until_at); one unfinished run per scope. A lease, renewed by every event's transaction and checked
--    in it, keeps one process on a run at a time (pooler-safe, like event_backfill_checkpoints).
create table inbox_rebuilds (
  id               bigint generated always as identity primary key,
  args             jsonb       not null,
  since_at         timestamptz not null,
  until_at         timestamptz not null,
  -- Rows counted at the first start: what the run has to go through, and how much it went through.
  total            integer     not null,
  done             integer     not null default 0,
  failed           integer     not null default 0,
  -- The failed events (their handler refused them: rolled back and passed), the first 1,000 of them,
  -- each {"provider", "endpoint", "eventId", "error"}: kept with the run, whichever process ran them.
  failures         jsonb       not null default '[]',
  -- Rows the replays wrote, over all user tables (pg_stat_xact_user_tables, as `inbox replay` reports).
  inserted         bigint      not null default 0,
  updated          bigint      not null default 0,
  deleted          bigint      not null default 0,
  -- The last row replayed (or passed), in the run's order: (received_at, provider, endpoint, event_id).
  cursor_received_at timestamptz,
  cursor_provider  text,
  cursor_endpoint  text,
  cursor_event_id  text,
  lease_owner      text,
  lease_until      timestamptz,
  started_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  finished_at      timestamptz
);
create unique index inbox_rebuilds_unfinished on inbox_rebuilds (args) where finished_at is null;

-- 3. The worker's claim walks due rows group by group, a group being one endpoint and account
--    (src/worker/claim.ts): it takes each group's oldest rows and interleaves the accounts, so a
--    connected account with 10,000 rows queued does not stand in front of one with a single row, and a
--    paused endpoint (or a provider the worker does not serve) is stepped over whole. The due index is
--    keyed by group, then due time, for that walk (PostgreSQL wiki, "Loose indexscan"). Replacing it
--    scans the table once under a SHARE lock: receivers and workers wait for it (docs/upgrading.md).
drop index webhook_inbox_due;
create index webhook_inbox_due on webhook_inbox (provider, endpoint, account, available_at)
  where processed_at is null and needs_review_at is null;
