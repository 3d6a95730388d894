-- The inbox partitioned by week of the event's own creation time, so retention drops whole partitions
-- instead of deleting rows one by one (docs/scale.md, docs/operations.md "Retention").
--
-- Why (a), partition by `event_created_at`, and not (b), a narrow unpartitioned key table:
--  * A unique key on a partitioned table must include the partition key (PostgreSQL manual, "Table
--    Partitioning", 5.12.2.3 Limitations), so the idempotency key becomes
--    (provider, endpoint, event_id, event_created_at). It stays exact because every delivery of one event
--    carries the same creation time: Stripe's `created` (snapshot and thin events, webhook and Events API
--    alike), Paddle's `occurred_at`, Adyen's `eventDate`, Shopify's X-Shopify-Triggered-At; insertInbox
--    writes it as to_timestamp(seconds), the same value for the same input.
--  * An event whose provider gives no creation time (GitHub always; Standard Webhooks, whose timestamp is
--    per attempt; Shopify without the header) is stored "undated": event_created_at = '-infinity', in the
--    partition webhook_inbox_undated. Its key is then (provider, endpoint, event_id, -infinity): exact by
--    the event id alone, as before. Purge deletes undated rows in batches by `received_at` (their first
--    arrival, the clock 0019 fell back on).
--  * (b) would keep dedup independent of timestamps, but its key table still needs a DELETE per event
--    (the bloat this change removes), a second insert on every delivery, and a way to stay in step with
--    every TRUNCATE, DELETE and row movement of the wide table.
-- Weekly, not monthly: purge can drop a partition only once its whole week is past the horizon, so a
-- drop-only purge keeps at most 7 days beyond it (monthly: up to 31), and the one partition that
-- straddles the horizon is a week of rows. The price is more partitions for a lookup by
-- (provider, endpoint, event_id) alone to probe: ~6 for the 31-day minimum, each an index probe.
-- webhook_inbox_default takes an event whose time has no partition yet (a clock far ahead, a week not
-- created), so no delivery is ever refused; webhook_inbox_ensure_partitions() moves such rows into their
-- week's partition when it creates it, and purge deletes settled rows in it in batches.
--
-- Locking: this migration holds ACCESS EXCLUSIVE on webhook_inbox while it copies every row into the
-- new table and builds its indexes (one transaction, with the other pending migrations): receivers and
-- workers wait for it. docs/scale.md gives the measured time per million rows; purge first to shorten it.
-- Nothing can insert meanwhile, and the copy keeps every key, so no duplicate is possible during or after.

lock table webhook_inbox in access exclusive mode;

-- 1. What to rebuild on the new table: the view and every secondary index (by their current definitions,
--    so a column or index added by an earlier migration is carried over as it is).
create temporary table m0026_rebuild on commit drop as
select 'create view webhook_inbox_state as ' || pg_get_viewdef('webhook_inbox_state'::regclass) as ddl, 2 as step
union all
select pg_get_indexdef(i.indexrelid), 1
  from pg_index i
 where i.indrelid = 'webhook_inbox'::regclass
   and not i.indisprimary;

drop view webhook_inbox_state;
alter table webhook_inbox rename to webhook_inbox_unpartitioned;
alter table webhook_inbox_unpartitioned drop constraint webhook_inbox_pkey;
do $$
declare
  idx record;
begin
  for idx in select indexrelid::regclass as name from pg_index where indrelid = 'webhook_inbox_unpartitioned'::regclass loop
    execute format('drop index %s', idx.name);
  end loop;
end
$$;

-- 2. The partitioned table: same columns, defaults and checks. A row inserted without a creation time
--    is undated (see above), not "now": otherwise two deliveries of one event would differ in the key.
create table webhook_inbox (like webhook_inbox_unpartitioned including defaults including constraints including storage including comments)
  partition by range (event_created_at);
alter table webhook_inbox alter column event_created_at set default '-infinity';

create table webhook_inbox_undated partition of webhook_inbox for values from (minvalue) to ('1970-01-01 00:00:00+00');
create table webhook_inbox_default partition of webhook_inbox default;

-- 3. One week's partition, named by its Monday (UTC): webhook_inbox_YYYYMMDD. Created as a table of its
--    own and attached (SHARE UPDATE EXCLUSIVE on webhook_inbox: inserts and updates go on; PostgreSQL
--    manual, ALTER TABLE "ATTACH PARTITION"). Rows of that week waiting in the default partition are
--    moved into it first (the default partition locked meanwhile), since attaching is refused while the
--    default partition holds rows of the new range. Returns whether it created the partition.
create function webhook_inbox_create_partition(week_start timestamptz, week_end timestamptz, name text)
returns boolean
language plpgsql
as $$
begin
  if to_regclass(format('%I', name)) is not null then
    return false;
  end if;
  execute format('create table %I (like webhook_inbox including defaults including constraints including storage)', name);
  execute format('alter table %I add constraint %I check (event_created_at >= %L and event_created_at < %L)',
                 name, name || '_range', week_start, week_end);
  if exists (select 1 from webhook_inbox_default where event_created_at >= week_start and event_created_at < week_end) then
    lock table webhook_inbox_default in access exclusive mode;
    execute format('with moved as (delete from webhook_inbox_default where event_created_at >= %L and event_created_at < %L returning *)
                    insert into %I select * from moved', week_start, week_end, name);
  end if;
  execute format('alter table webhook_inbox attach partition %I for values from (%L) to (%L)', name, week_start, week_end);
  execute format('alter table %I drop constraint %I', name, name || '_range');
  return true;
end
$$;

-- 4. Weekly partitions from the current week (UTC Monday) until `ahead` from now; idempotent, and safe to
--    call from many processes at once: the callers queue on a transaction-level advisory lock (pooler
--    safe) and the later ones find the partitions made. Called at start by serve and worker and by
--    `inbox purge`. Returns how many it created. No extension needed (works on managed databases).
create function webhook_inbox_ensure_partitions(ahead interval)
returns integer
language plpgsql
as $$
declare
  week timestamptz := date_trunc('week', now(), 'UTC');
  created integer := 0;
begin
  perform pg_advisory_xact_lock(hashtext('webhook-inbox:partitions'));
  while week < now() + ahead loop
    if webhook_inbox_create_partition(week, week + interval '7 days', 'webhook_inbox_' || to_char(week at time zone 'UTC', 'YYYYMMDD')) then
      created := created + 1;
    end if;
    week := week + interval '7 days';
  end loop;
  return created;
end
$$;

-- 5. Today's rows: the five weeks before this one (the 31-day minimum retention) and four weeks ahead
--    get weekly partitions; anything older goes into one partition, webhook_inbox_before_YYYYMMDD, that
--    purge drops whole once it is past the horizon.
do $$
declare
  first_week timestamptz := date_trunc('week', now(), 'UTC') - interval '5 weeks';
  week timestamptz := first_week;
begin
  execute format('create table %I partition of webhook_inbox for values from (%L) to (%L)',
                 'webhook_inbox_before_' || to_char(first_week at time zone 'UTC', 'YYYYMMDD'), '1970-01-01 00:00:00+00', first_week);
  while week < date_trunc('week', now(), 'UTC') loop
    execute format('create table %I partition of webhook_inbox for values from (%L) to (%L)',
                   'webhook_inbox_' || to_char(week at time zone 'UTC', 'YYYYMMDD'), week, week + interval '7 days');
    week := week + interval '7 days';
  end loop;
end
$$;
select webhook_inbox_ensure_partitions(interval '4 weeks');

-- 6. Copy the rows, keys kept. A row stored with no creation time of its own got event_created_at equal
--    to its received_at (insertInbox's `coalesce(…, now())`, 0019's backfill): it becomes undated, so a
--    redelivery (which has no time either) meets its key. A Stripe payload's `created` settles it.
do $$
declare
  cols text := (select string_agg(format('%I', attname), ', ' order by attnum)
                  from pg_attribute
                 where attrelid = 'webhook_inbox_unpartitioned'::regclass and attnum > 0 and not attisdropped);
begin
  execute format(
    'insert into webhook_inbox (%s) select %s from webhook_inbox_unpartitioned',
    cols,
    replace(cols, 'event_created_at',
            'case when event_created_at = received_at and not coalesce(payload ? ''created'', false) then ''-infinity''::timestamptz else event_created_at end'));
end
$$;
drop table webhook_inbox_unpartitioned;

-- 7. The key and the indexes, built once over the copied rows (each becomes one index per partition).
alter table webhook_inbox add constraint webhook_inbox_pkey primary key (provider, endpoint, event_id, event_created_at);
do $$
declare
  r record;
begin
  for r in select ddl from m0026_rebuild order by step loop
    execute r.ddl;
  end loop;
end
$$;
analyze webhook_inbox;
