-- Lets a one-statement handler refuse an event it must not apply: raises SQLSTATE 22000 (data
-- exception), which the receiver and the worker treat as permanent, so the event is parked as
-- needs-review (visible to operators) instead of being acknowledged with nothing done. Returns boolean
-- so it can stand in a CASE inside a WHERE clause, where CASE fixes the evaluation order.
create function webhook_inbox_refuse(reason text)
returns boolean
language plpgsql
volatile
as $$
begin
  raise exception using errcode = '22000', message = reason;
end
$$;
