import type { Tx } from "./db.ts";

/** What a handler knows about the event it applies, besides `data.object`. */
export interface HandlerContext {
  provider: string;
  endpoint: string;
  /** Provider event id (evt_…). */
  eventId: string;
  eventType: string;
}

/**
 * A business handler: applies one event's `data.object` using only `tx` (it runs inside the inbox
 * transaction). It must be idempotent and order-independent on its own (monotonic state transitions,
 * business-key unique constraints), because distinct Event objects can carry one business fact.
 * It must not wait on the network or on timers: the transaction holds the inbox row lock.
 * Throws to roll everything back; throws {@link PermanentError} when retrying cannot help.
 */
export type Handler = (tx: Tx, object: Record<string, unknown>, context: HandlerContext) => Promise<void>;

/** Event type → handler. Types without an entry are recorded as `ignored`. */
export type HandlerTable = Readonly<Record<string, Handler>>;

/**
 * A handler failure that no retry can fix (e.g. a payload missing a required field). The sync
 * receiver still answers 5xx (the transaction rolled back); the async worker parks the row as
 * needs-review at once instead of burning attempts.
 */
export class PermanentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PermanentError";
  }
}

/** `data.object` of a verified provider event (checked to be an object by the verifier). */
export function dataObject(payload: Record<string, unknown>): Record<string, unknown> {
  const data = payload.data as { object?: unknown } | undefined;
  const object = data?.object;
  if (typeof object !== "object" || object === null || Array.isArray(object)) {
    throw new PermanentError("Event has no data.object");
  }
  return object as Record<string, unknown>;
}
