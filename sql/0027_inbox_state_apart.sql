-- The inbox split in two (docs/scale.md, "State apart from payloads"):
--  * webhook_inbox: one narrow, unpartitioned row per event, keyed by the seed's idempotency key
--    (provider, endpoint, event_id) as a primary key again: what decides "duplicate or new" is this
--    constraint, for every provider and every path, with no timestamp from the sender in it (seed §4;
--    PostgreSQL manual, INSERT "ON CONFLICT Clause"). The worker's claim and settle update only this row.
--    The event's own creation time is data (`event_created_at`, null when the sender gives none).
--  * webhook_inbox_payloads: the verified bytes (payload, raw body, what sanitizing replaced), written
--    once in the statement that inserts the state row and never updated, range-partitioned by week of
--    the state row's `received_at` (the product's own clock, always known), so retention drops the bulk
--    by partition. A payload row is found by the state row's key and `received_at` (one partition).
-- Retention removes a state row only once its provider can no longer send the event again
-- (ops/purge.ts), and a payload partition only after moving out the payloads of rows still unsettled.
--
-- From 0025 (one unpartitioned table) and from 0026 (partitioned by the sender's creation time, whose
-- key let one event id have two rows): every row is copied, keys kept; where one event id has several
-- rows at an endpoint, the one that settled it is kept (else a needs-review one, else the first
-- received) and the others are moved to webhook_inbox_merged_0027, created only when there are any, for
-- an operator to read and drop (docs/operations.md, "Upgrading to 0027").
--
-- Locking: ACCESS EXCLUSIVE on webhook_inbox from the first statement to the commit: receivers and
-- workers wait for it (docs/operations.md gives the time measured per million rows).

lock table webhook_inbox in access exclusive mode;

drop view webhook_inbox_state;
alter table webhook_inbox rename to webhook_inbox_0026;
-- The name of the old primary key (and, from 0026, of its partitions' indexes) is needed again below.
alter index webhook_inbox_pkey rename to webhook_inbox_0026_pkey;
drop function if exists webhook_inbox_ensure_partitions(interval);
drop function if exists webhook_inbox_create_partition(timestamptz, timestamptz, text);

-- 1. The state row.
create table webhook_inbox (
  provider         text        not null,
  endpoint         text        not null,
  event_id         text        not null,
  event_type       text        not null,
  account          text        not null default '',       -- Stripe Connect: acct_…, '' for the platform (0021)
  livemode         boolean,                               -- Stripe's livemode; null for providers without modes
  source           text        not null default 'webhook',
  event_created_at timestamptz,                           -- the sender's creation time, data only; null: none given
  received_at      timestamptz not null default now(),    -- first arrival; also where the payload row is
  available_at     timestamptz not null default now(),    -- due time, or the end of a worker's lease
  attempts         integer     not null default 0,        -- counted at claim time, before work; the fencing token
  defers           integer     not null default 0,        -- API reads deferred in a row (0019)
  last_error       text,
  processed_at     timestamptz,
  outcome          text,
  needs_review_at  timestamptz,
  resolution_note  text,
  traceparent      text,                                  -- W3C trace context of the span that recorded it (0023)
  constraint webhook_inbox_pkey primary key (provider, endpoint, event_id),
  constraint webhook_inbox_source_check check (source in ('webhook', 'api', 'reconcile')),
  constraint webhook_inbox_outcome_check check (outcome in ('processed', 'ignored', 'resolved', 'object_missing', 'ignored_mode')),
  constraint webhook_inbox_check check ((processed_at is null) = (outcome is null)),
  constraint webhook_inbox_parked_unprocessed check (needs_review_at is null or processed_at is null),
  constraint webhook_inbox_resolution_noted check ((outcome = 'resolved') = (resolution_note is not null))
);

-- 2. The payloads, by week of received_at (UTC Monday). A payload whose week has no partition (none
--    created yet) goes to the default partition, so no delivery is ever refused for want of one.
create table webhook_inbox_payloads (
  provider          text        not null,
  endpoint          text        not null,
  event_id          text        not null,
  received_at       timestamptz not null,                 -- its state row's received_at
  payload           jsonb,                                -- null: jsonb refused even a sanitized copy
  raw_body          text,                                 -- the exact verified bytes, when payload is a sanitized copy or null
  payload_sanitized text,                                 -- what the sanitized copy replaced (0010)
  constraint webhook_inbox_payloads_pkey primary key (provider, endpoint, event_id, received_at),
  constraint webhook_inbox_payloads_object check (jsonb_typeof(payload) = 'object'),
  constraint webhook_inbox_payloads_kept check (payload is not null or raw_body is not null),
  constraint webhook_inbox_payloads_sanitized_keeps_raw check (payload_sanitized is null or raw_body is not null)
) partition by range (received_at);
create table webhook_inbox_payloads_default partition of webhook_inbox_payloads default;

-- One week's partition, named by its Monday: webhook_inbox_payloads_YYYYMMDD. Made as a table of its own
-- and attached (SHARE UPDATE EXCLUSIVE on the parent: inserts go on; PostgreSQL manual, ALTER TABLE
-- "ATTACH PARTITION"); payloads of that week waiting in the default partition are moved into it first,
-- since attaching is refused while the default partition holds rows of the new range. True when created.
create function webhook_inbox_payloads_create_partition(week_start timestamptz, name text)
returns boolean
language plpgsql
as $$
declare
  week_end timestamptz := week_start + interval '7 days';
begin
  if to_regclass(format('%I', name)) is not null then
    return false;
  end if;
  execute format('create table %I (like webhook_inbox_payloads including defaults including constraints including storage)', name);
  execute format('alter table %I add constraint %I check (received_at >= %L and received_at < %L)', name, name || '_range', week_start, week_end);
  if exists (select 1 from webhook_inbox_payloads_default where received_at >= week_start and received_at < week_end) then
    lock table webhook_inbox_payloads_default in access exclusive mode;
    execute format('with moved as (delete from webhook_inbox_payloads_default where received_at >= %L and received_at < %L returning *)
                    insert into %I select * from moved', week_start, week_end, name);
  end if;
  execute format('alter table webhook_inbox_payloads attach partition %I for values from (%L) to (%L)', name, week_start, week_end);
  execute format('alter table %I drop constraint %I', name, name || '_range');
  return true;
end
$$;

-- Weekly payload partitions from the current week until `ahead` from now; idempotent and safe from many
-- processes at once (they queue on a transaction-level advisory lock, which works behind a transaction
-- pooler). Called by every process at start, by a receiver whose payload landed in the default
-- partition, and by `inbox purge`. Returns how many it created. No extension needed.
create function webhook_inbox_payloads_ensure_partitions(ahead interval)
returns integer
language plpgsql
as $$
declare
  week timestamptz := date_trunc('week', now(), 'UTC');
  created integer := 0;
begin
  perform pg_advisory_xact_lock(hashtext('webhook-inbox:partitions'));
  while week < now() + ahead loop
    if webhook_inbox_payloads_create_partition(week, 'webhook_inbox_payloads_' || to_char(week at time zone 'UTC', 'YYYYMMDD')) then
      created := created + 1;
    end if;
    week := week + interval '7 days';
  end loop;
  return created;
end
$$;

-- The five weeks before this one get a partition each; older payloads share one partition,
-- webhook_inbox_payloads_before_YYYYMMDD, which purge drops whole once all of it is past its horizon.
do $$
declare
  first_week timestamptz := date_trunc('week', now(), 'UTC') - interval '5 weeks';
  week timestamptz := first_week;
begin
  execute format('create table %I partition of webhook_inbox_payloads for values from (minvalue) to (%L)',
                 'webhook_inbox_payloads_before_' || to_char(first_week at time zone 'UTC', 'YYYYMMDD'), first_week);
  while week < date_trunc('week', now(), 'UTC') loop
    execute format('create table %I partition of webhook_inbox_payloads for values from (%L) to (%L)',
                   'webhook_inbox_payloads_' || to_char(week at time zone 'UTC', 'YYYYMMDD'), week, week + interval '7 days');
    week := week + interval '7 days';
  end loop;
end
$$;
select webhook_inbox_payloads_ensure_partitions(interval '4 weeks');

-- 3. Where one event id has several rows at an endpoint (0026 keyed rows by the creation time too), one
--    row stays: the one that settled the event (processed, ignored, resolved…), else a needs-review one,
--    else an unprocessed one; the first received among equals. The others are "merged" (kept below).
--    Rows are told apart by their 0026 key, which includes event_created_at.
create temporary table m0027_merged on commit drop as
select provider, endpoint, event_id, event_created_at
  from (select provider, endpoint, event_id, event_created_at,
               row_number() over (partition by provider, endpoint, event_id
                                  order by processed_at is null, needs_review_at is null, received_at, event_created_at) as n
          from webhook_inbox_0026
         where (provider, endpoint, event_id) in (select provider, endpoint, event_id
                                                    from webhook_inbox_0026
                                                   group by 1, 2, 3
                                                  having count(*) > 1)) ranked
 where n > 1;

do $$
begin
  if exists (select 1 from m0027_merged) then
    create table webhook_inbox_merged_0027 as
    select w.*, now() as merged_at
      from webhook_inbox_0026 w
      join m0027_merged m using (provider, endpoint, event_id, event_created_at);
    comment on table webhook_inbox_merged_0027 is
      'Second rows of one event id that sql/0027 merged into the row kept in webhook_inbox (docs/operations.md, "Upgrading to 0027"): read, then drop';
  end if;
end
$$;

-- 4. Copy the kept rows. A creation time is kept as data where the sender gave one: '-infinity' (0026's
--    "undated") becomes null, and so does a time that is only the arrival time (0019's fallback for a
--    provider that sends none). A row whose payload retention dropped (0004) gets no payload row.
insert into webhook_inbox (provider, endpoint, event_id, event_type, account, livemode, source, event_created_at,
                           received_at, available_at, attempts, defers, last_error, processed_at, outcome,
                           needs_review_at, resolution_note, traceparent)
select provider, endpoint, event_id, event_type, account,
       case when provider in ('stripe', 'stripe-thin') and jsonb_typeof(payload -> 'livemode') = 'boolean'
            then (payload ->> 'livemode')::boolean end,
       source,
       case when event_created_at = '-infinity' then null
            when event_created_at = received_at and provider not in ('stripe', 'stripe-thin', 'paddle') then null
            else event_created_at end,
       received_at, available_at, attempts, defers, last_error, processed_at, outcome,
       needs_review_at, resolution_note, traceparent
  from webhook_inbox_0026 w
 where not exists (select 1 from m0027_merged m
                    where (m.provider, m.endpoint, m.event_id, m.event_created_at) = (w.provider, w.endpoint, w.event_id, w.event_created_at));

insert into webhook_inbox_payloads (provider, endpoint, event_id, received_at, payload, raw_body, payload_sanitized)
select provider, endpoint, event_id, received_at, payload, raw_body, payload_sanitized
  from webhook_inbox_0026 w
 where (payload is not null or raw_body is not null)
   and not exists (select 1 from m0027_merged m
                    where (m.provider, m.endpoint, m.event_id, m.event_created_at) = (w.provider, w.endpoint, w.event_id, w.event_created_at));

drop table webhook_inbox_0026 cascade;

-- 5. The state row's indexes, built once over the copied rows.
-- The worker's claim: due rows, oldest first.
create index webhook_inbox_due on webhook_inbox (available_at) where processed_at is null and needs_review_at is null;
-- The operator's needs-review list and the backlog gauges.
create index webhook_inbox_needs_review on webhook_inbox (needs_review_at) where needs_review_at is not null;
create index webhook_inbox_open on webhook_inbox (received_at, needs_review_at, provider, endpoint) where processed_at is null;
-- Recent arrivals (status, activity, the events list) and the key purge, both by received_at.
create index webhook_inbox_received_at on webhook_inbox (received_at);

-- 6. One definition of a row's state, for the operator commands and metrics (0004, 0009).
create view webhook_inbox_state as
select provider, endpoint, event_id, event_type, account, livemode, source, event_created_at, received_at,
       available_at, attempts, last_error, processed_at, outcome, needs_review_at, resolution_note,
       case
         when processed_at is not null then outcome
         when needs_review_at is not null then 'needs_review'
         else 'unprocessed'
       end as state
  from webhook_inbox;

analyze webhook_inbox;
analyze webhook_inbox_payloads;
