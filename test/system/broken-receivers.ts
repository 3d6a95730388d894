// Deliberately BROKEN receivers, kept under test/ only: they reproduce the seed's §2 failure modes so
// that test/system/broken-receivers.test.ts can show each one losing or doubling an event, next to
// receiveSync (src/receiver/receive.ts) surviving the same fault. Never import this file from src/.
import type { Db } from "../../src/db/db.ts";
import type { Handler, HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { inboxRow, insertInbox, type InboxKey } from "../../src/inbox/inbox.ts";
import type { VerifiedEvent } from "../../src/providers/provider.ts";
import type { Outcome, ReceiveTarget } from "../../src/receiver/receive.ts";

/**
 * ❌ Case A (seed §2): records the event as processed in its own transaction, then applies it in a
 * second one. A failure in the second leaves a "processed" row with no effect: the redelivery
 * answers duplicate and the event is lost (at-most-once).
 */
export async function receiveRecordFirst(db: Db, target: ReceiveTarget, event: VerifiedEvent): Promise<Outcome> {
  const key = inboxKey(target, event);
  const inserted = await db.begin((tx) => insertInbox(tx, [inboxRow(key, event, "processed")]));
  if (inserted.size === 0) return "duplicate";
  const handler = target.handlers[event.type];
  if (!handler) return "ignored";
  await db.begin((tx) => handler(tx, event.subject.object, { ...key, eventType: event.type }));
  return "processed";
}

/** Hooks into {@link receiveApplyFirst}'s gaps, where a real process could stop or be overtaken. */
export interface ApplyFirstHooks {
  /** After the "already seen?" SELECT found nothing, before applying (the TOCTOU window). */
  afterCheck?: () => Promise<void>;
  /** After the business transaction committed, before the inbox row is written (the crash window). */
  afterCommit?: () => Promise<void>;
}

/**
 * ❌ Case B (seed §2): checks the inbox with a SELECT, applies and commits the business change, and
 * only then records the event. A crash between the two commits leaves the effect without the
 * record, so the redelivery applies it again (at-least-once); two concurrent deliveries can both
 * pass the SELECT (TOCTOU) and both apply.
 */
export async function receiveApplyFirst(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  hooks: ApplyFirstHooks = {},
): Promise<Outcome> {
  const key = inboxKey(target, event);
  const seen = await db`
    select 1
      from webhook_inbox
     where provider = ${key.provider}
       and endpoint = ${key.endpoint}
       and event_id = ${key.eventId}
  `;
  if (seen.length > 0) return "duplicate";
  await hooks.afterCheck?.();
  const handler = target.handlers[event.type];
  if (handler) await db.begin((tx) => handler(tx, event.subject.object, { ...key, eventType: event.type }));
  await hooks.afterCommit?.();
  await db.begin((tx) => insertInbox(tx, [inboxRow(key, event, handler ? "processed" : "ignored")]));
  return handler ? "processed" : "ignored";
}

/** `table[type]`, or a thrown error naming the type (a test table missing an entry is a test bug). */
export function requireHandler(table: HandlerTable, type: string): Handler {
  const handler = table[type];
  if (!handler) throw new Error(`Cannot find handler: no entry for ${type}`);
  return handler;
}

function inboxKey(target: ReceiveTarget, event: VerifiedEvent): InboxKey {
  return { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
}

/**
 * A deliberately NON-idempotent `invoice.paid` table: the real billing handler, then one
 * `ReceiptEmailRequested` outbox row on every run. The billing handler alone would hide a double
 * application (its `unique (invoice_id, kind)` ledger key books the payment once however often it
 * runs), so the crash tests count receipt rows: every extra run of the handler shows up as one more.
 */
export const receiptHandlers: HandlerTable = {
  "invoice.paid": async (tx, object, context) => {
    await requireHandler(billingHandlers, "invoice.paid")(tx, object, context);
    const receipt = JSON.stringify({ invoice_id: object.id, event_id: context.eventId });
    await tx`
      insert into outbox (aggregate_type, aggregate_id, event_type, message_key, payload)
      values ('Invoice', ${String(object.id)}, 'ReceiptEmailRequested', gen_random_uuid()::text, ${receipt}::text::jsonb)
    `;
  },
};
