-- Trace context of an event and of what its handler wrote (W3C Trace Context, "traceparent" header,
-- `00-<trace id>-<span id>-<flags>`), for OpenTelemetry: src/telemetry.ts. Null when tracing is off.
--
-- webhook_inbox.traceparent: the span that recorded the delivery; a worker's span that applies the
-- row hours later links to it, so one event's trace can be followed across the queue.
-- outbox.traceparent: the span whose transaction wrote the message. The applying transaction sets
-- `webhook_inbox.traceparent` for itself (set_config(…, true)), so every outbox row a handler inserts
-- gets it without the handler knowing; the dispatcher sends a child of it to the sink.
alter table webhook_inbox add column traceparent text;
alter table outbox add column traceparent text default nullif(current_setting('webhook_inbox.traceparent', true), '');
