-- The outbox insert trigger of 0005 made every booking transaction NOTIFY, and PostgreSQL serializes
-- the commits of all notifying transactions on one database-wide lock held through the commit
-- (async.c, PreCommit_Notify): measured about 40% fewer events per second for the worker with 4 slots.
-- Dispatchers are now woken by a coalesced NOTIFY the receiver and the worker send after a processed
-- event's commit (src/notifier.ts), and they poll as before.
drop trigger outbox_notify on outbox;
drop function outbox_notify();
