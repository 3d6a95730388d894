-- The gate of every one-statement handler, applied by the framework rather than by each handler. The
-- statement's final select calls it with `applied`, "the inbox insert (sync) or the FOR UPDATE
-- re-check (worker) found work to do", and `written`, the number of rows the handler's steps
-- inserted, updated or deleted (counted from their RETURNING rows, which the final select reads, so
-- every step has run to completion before this is evaluated). When there was nothing to apply but a
-- step wrote anyway (it forgot to test the gate), it raises SQLSTATE WI001: the whole statement fails
-- and every write of every step rolls back with it. The caller maps WI001 to `duplicate` (sync) or
-- `skipped` (worker). A duplicate whose steps wrote nothing returns false without an error, so an
-- ordinary redelivery costs no error and no server log line. PostgreSQL manual, "WITH Queries",
-- "Data-Modifying Statements in WITH".
create function webhook_inbox_gate(applied boolean, written bigint)
returns boolean
language plpgsql
volatile
as $$
begin
  if not applied and written > 0 then
    raise exception using errcode = 'WI001', message = format('Nothing to apply, but the handler wrote %s row(s): the event is already recorded or settled; the statement''s writes are rolled back', written);
  end if;
  return applied;
end
$$;
