-- Surviving a database failover (docs/failover.md).
--
-- 1. database_primaries: each PostgreSQL primary the receiver and the worker have written to, by
--    (system_identifier, timeline_id) (PostgreSQL manual, "System Information Functions": pg_control_system;
--    "Timelines" in "Continuous Archiving"). A promoted standby keeps the system identifier and starts a
--    new timeline; a restored or rebuilt cluster has another identifier. `last_seen_at` is moved by every
--    check, so on the new primary the old row holds the last moment the old one was seen to replicate:
--    the start of the window the event backfill reads again (src/runtime/failover.ts).
-- 2. outbox.message_id: the Standard Webhooks message id, derived from the business change instead of the
--    row's `id` (an identity sequence a failover can move, and that a re-created row never shares):
--    'msg_' || 32 hex digits of sha256(account, aggregate_type, aggregate_id, event_type, message_key).
--    `message_key` tells apart two messages of one (account, aggregate, event type) that really are two
--    (a subscription's access starting again); '' where there is only ever one. Rows written before this
--    migration keep the id a sink may have seen already: null here, read as 'msg_outbox_' || id.
create table database_primaries (
  system_identifier text        not null,
  timeline_id       integer     not null,
  first_seen_at     timestamptz not null default now(),
  last_seen_at      timestamptz not null default now(),
  primary key (system_identifier, timeline_id)
);

alter table outbox
  add column message_key text not null default '',
  add column message_id  text;

create function outbox_message_id() returns trigger
  language plpgsql as $$
begin
  if new.message_id is null then
    new.message_id := 'msg_' || left(encode(sha256(convert_to(
      concat_ws(chr(31), new.account, new.aggregate_type, new.aggregate_id, new.event_type, new.message_key), 'UTF8')), 'hex'), 32);
  end if;
  return new;
end
$$;

create trigger outbox_message_id
  before insert on outbox
  for each row
  execute function outbox_message_id();
