import type { Tx } from "../db/db.ts";
import { keyIs } from "../inbox/inbox.ts";
import type { HandlerContext } from "./handler-table.ts";

/**
 * When the sender created the event a handler is applying: its inbox row's `event_created_at` (Stripe's
 * Event `created`, Unix seconds, stored as a timestamp), read inside the handler's transaction through
 * `tx`. For handlers that must be order-independent over `*.updated` events: keep the newest by this
 * time (Stripe docs, "Event ordering": events are not guaranteed to arrive in the order they were
 * created). Undefined when the sender gave no creation time (Shopify, Adyen rows) or the context is a
 * reconcile repair's key with no inbox row of an event.
 */
export async function eventCreatedAt(tx: Tx, context: HandlerContext): Promise<Date | undefined> {
  const [row] = await tx<{ created: Date | null }[]>`
    select event_created_at as created
      from webhook_inbox
     where ${keyIs(tx, context)}
  `;
  return row?.created ?? undefined;
}
