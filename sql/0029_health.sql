-- Health you can see (docs/operations.md, "Operator's page"; docs/observability.md, "Metrics and alerts").
--
-- 1. loop_heartbeats: one row per running worker or dispatcher process, upserted once per beat
--    interval by the process itself (src/loop/heartbeat.ts), never per claim. A row whose beat is older
--    than 3 of its own intervals is a process that died (SIGKILL, a lost host); a process that stops
--    cleanly says so (stopped_at). Rows silent for a day are deleted by the next beat of any process.
create table loop_heartbeats (
  id            text        primary key,                          -- random, per process start
  kind          text        not null check (kind in ('worker', 'dispatcher')),
  host          text        not null,
  pid           integer     not null,
  detail        text        not null default '',                  -- what it serves: slots, the sink's origin (never a secret)
  started_at    timestamptz not null default now(),
  beat_at       timestamptz not null default now(),               -- the database's clock, so hosts' clocks never matter
  beat_every_ms integer     not null check (beat_every_ms > 0),
  last_claim_at timestamptz,                                      -- the last claim that took work
  claimed       bigint      not null default 0,                   -- rows (worker) or messages (dispatcher) claimed since start
  stopped_at    timestamptz
);

-- 2. webhook_inbox_hours: per endpoint and closed hour of arrival, what the operator's 30-day charts and
--    the "provider went silent" gauges need, computed once from the state rows by whoever reads them
--    (src/ops/inbox-hours.ts) instead of scanning 30 days of rows on every page load or scrape. Nothing
--    is written on the delivery path. A row counts the state rows received in its hour; rows then still
--    unsettled (`open`) are read live, and the hour is computed again once fewer of them are open (no row
--    is ever received into a past hour, so an hour's open count can only fall). `settled_later` counts the
--    hour's rows that settled in a later hour, by that hour: what the backlog at each hour's end needs.
--    An hour in which an endpoint received nothing has no row; webhook_inbox_hours_filled says which hours
--    were computed. Rows older than 32 days are deleted by the next fill.
create table webhook_inbox_hours (
  provider          text             not null,
  endpoint          text             not null,
  hour              timestamptz      not null,                    -- start of the hour of received_at
  received          integer          not null,
  open              integer          not null,                    -- unsettled when computed (unprocessed or needs-review)
  failed            integer          not null,                    -- settled after more than one attempt, or resolved by hand
  resolved          integer          not null,                    -- needs-review rows an operator closed (inbox resolve)
  latency_p95_ms    double precision,                             -- processed rows: processed_at - received_at; null: none
  latency_max_ms    double precision,
  first_received_at timestamptz      not null,
  last_received_at  timestamptz      not null,
  max_gap_ms        double precision,                             -- longest time between two arrivals within the hour; null: one row
  settled_later     jsonb            not null default '{}',       -- {"<ISO hour>": rows of this hour settled in that later hour}
  computed_at       timestamptz      not null default now(),
  primary key (provider, endpoint, hour),
  check (jsonb_typeof(settled_later) = 'object')
);

create table webhook_inbox_hours_filled (
  hour        timestamptz primary key,
  computed_at timestamptz not null default now()
);

-- 3. reconcile_runs: the latest object reconciliation (`bun run reconcile invoices|refunds|disputes`) per
--    kind and account, so /metrics can say that one found drift (alert WebhookReconcileDrift) although
--    the command itself is a cron job that exits.
create table reconcile_runs (
  kind        text        not null,
  account     text        not null,                               -- acct_…, '' for the platform
  finished_at timestamptz not null default now(),
  since       timestamptz not null,                               -- objects created since
  checked     integer     not null,
  drifted     integer     not null,
  repaired    integer     not null,                               -- drifted objects a --repair applied
  by_class    jsonb       not null default '{}',
  primary key (kind, account),
  check (jsonb_typeof(by_class) = 'object')
);
