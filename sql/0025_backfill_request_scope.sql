-- A backfill request per (endpoint, account, requester): a health notification that reaches two thin
-- endpoints (two event destinations) asks each to backfill its own events, and one naming a connected
-- account's change (its data.impact.context) asks for that account's events (read with Stripe-Account).
-- Before, requested_by was unique across endpoints, so the second endpoint's request was dropped.
alter table event_backfill_requests
  add column account text not null default '',
  drop constraint event_backfill_requests_requested_by_key,
  add constraint event_backfill_requests_scope_key unique (endpoint, account, requested_by);
