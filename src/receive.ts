import type { Db } from "./db.ts";
import { dataObject, type HandlerTable } from "./handler-table.ts";
import { recordEvent } from "./inbox.ts";
import type { VerifiedEvent } from "./provider.ts";

/** The result of one delivery, returned as a value (all are 2xx). */
export type Outcome = "processed" | "duplicate" | "ignored";

/** Where an event is received: the inbox key's provider and endpoint, and the endpoint's handler table. */
export interface ReceiveTarget {
  provider: string;
  endpoint: string;
  handlers: HandlerTable;
}

/**
 * Sync mode (seed §5.3): in one `sql.begin` transaction, record the event in the inbox and apply its
 * handler; both commit together or neither does.
 * - `duplicate`: the key was already recorded (or a concurrent delivery committed it first).
 * - `ignored`: no handler for the type; the row is recorded so a redelivery is a duplicate.
 * - `processed`: the handler ran and committed with the inbox row.
 * Throws whatever the handler or the database threw, after the rollback: nothing of this attempt
 * remains, so the provider's retry processes it again (no Case A loss, no Case B double booking).
 */
export function receiveSync(db: Db, target: ReceiveTarget, event: VerifiedEvent): Promise<Outcome> {
  const handler = target.handlers[event.type];
  const key = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  return db.begin(async (tx): Promise<Outcome> => {
    const inserted = await recordEvent(tx, key, event, handler ? "processed" : "ignored");
    if (!inserted) return "duplicate";
    if (!handler) return "ignored";
    await handler(tx, dataObject(event.payload), { ...key, eventType: event.type });
    return "processed";
  });
}
