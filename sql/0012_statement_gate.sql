-- The gate of every one-statement handler, applied by the framework rather than by each handler. The
-- statement's final select is
--   case when <the inbox insert (sync) or FOR UPDATE re-check (worker) found work> then true
--        when not (<a step wrote a row>) then false
--        else webhook_inbox_ungated() end
-- where "a step wrote" is read from the steps' RETURNING rows (`exists (select 1 from h_step)`), so
-- every step that returned nothing has run to completion before the answer is known. When there was
-- nothing to apply but a step wrote anyway (it forgot to test the gate), this raises SQLSTATE WI001:
-- the whole statement fails and every write of every step rolls back with it. The caller maps WI001
-- to `duplicate` (sync) or `skipped` (worker). An ordinary duplicate never calls it: no error, no
-- server log line. PostgreSQL manual, "WITH Queries", "Data-Modifying Statements in WITH"; CASE
-- evaluates its branches lazily ("Conditional Expressions").
create function webhook_inbox_ungated()
returns boolean
language plpgsql
volatile
as $$
begin
  raise exception using errcode = 'WI001', message = 'Nothing to apply, but the handler wrote rows: the event is already recorded or settled; the statement''s writes are rolled back';
end
$$;
