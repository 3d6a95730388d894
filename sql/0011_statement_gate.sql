-- The gate of every one-statement handler, applied by the framework rather than by each handler: the
-- statement's final select calls it with "the inbox insert (sync) or the FOR UPDATE re-check (worker)
-- found work to do". When it found none (a duplicate, or a row another worker settled), it raises
-- SQLSTATE WI001 so the whole statement fails and every write of the handler's steps rolls back with
-- it, whether or not a step tested the gate itself (PostgreSQL manual, "WITH Queries", data-modifying
-- statements in WITH run to completion whatever the primary query reads). The caller maps WI001 to
-- `duplicate` (sync) or `skipped` (worker). Returns true so it can stand in the select list.
create function webhook_inbox_gate(applied boolean)
returns boolean
language plpgsql
volatile
as $$
begin
  if not applied then
    raise exception using errcode = 'WI001', message = 'Nothing to apply: the event is already recorded or settled; the statement''s writes are rolled back';
  end if;
  return true;
end
$$;
