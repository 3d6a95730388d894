-- One outbox message per fact (issue 33; review of fcab188, R3 and R9). The message id of sql/0024 is
-- derived from (account, aggregate_type, aggregate_id, event_type, message_key); a unique index makes it
-- the handlers' business key: the same fact written again (a captured Shopify or GitHub body replayed
-- under a fresh id header, an event applied again after a failover) writes nothing
-- (src/handlers/insert-outbox.ts: on conflict (message_id) do nothing).
--
-- Rows already sharing an id keep it on the first (lowest id) only; each other one takes the id a row
-- written before 0024 is read as, 'msg_outbox_' || id (src/outbox/claim.ts), distinct from every derived
-- id ('msg_' and 32 hex digits). Those were either distinct facts that collided (two GitHub pushes with
-- the same `after`), which a sink dropping seen ids lost, or the same fact twice, which it dropped.
-- Null ids (rows from before 0024) stay null: a unique index keeps nulls apart.
update outbox o
   set message_id = 'msg_outbox_' || o.id
  from (select id, row_number() over (partition by message_id order by id) as n
          from outbox
         where message_id is not null) d
 where o.id = d.id
   and d.n > 1;

create unique index outbox_message_id_key on outbox (message_id);
