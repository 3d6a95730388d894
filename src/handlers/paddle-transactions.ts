import type { Tx } from "../db/db.ts";
import { handlerTable, PermanentError, type HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";

/**
 * Paddle Billing `transaction.completed` (developer.paddle.com, "transaction.completed"): books the
 * transaction as one `PaddleTransactionBooked` outbox message `{ transaction, customer, currency,
 * grand_total, event_id }` keyed by its `txn_…` id; `grand_total` is `details.totals.grand_total`, a
 * string of minor units, stored as a number. Once per transaction: its retries carry the same signed
 * `event_id`, the inbox key, and a second event for it writes nothing ({@link insertOutbox}). Runs inside
 * the inbox transaction.
 * @throws PermanentError when the transaction has no id, currency_code or integer grand_total (up to 15 digits).
 */
export async function bookTransaction(tx: Tx, transaction: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const { id, currency_code: currency, customer_id: customer } = transaction;
  const totals = (transaction.details as { totals?: { grand_total?: unknown } } | undefined)?.totals;
  const total = totals?.grand_total;
  if (typeof id !== "string" || typeof currency !== "string" || typeof total !== "string" || !/^\d{1,15}$/.test(total))
    throw new PermanentError("Cannot book Paddle transaction: id, currency_code and details.totals.grand_total (minor units) are required");
  const customerId = typeof customer === "string" ? customer : null;
  const payload = { transaction: id, customer: customerId, currency, grand_total: Number(total), event_id: context.eventId };
  await insertOutbox(
    tx,
    { account: "", aggregate: ["PaddleTransaction", id], eventType: "PaddleTransactionBooked", messageKey: "" },
    payload,
  );
}

/** The Paddle example handler table: `transaction.completed` (see {@link bookTransaction}); other types are recorded `ignored`. */
export const paddleHandlers = handlerTable({ "transaction.completed": bookTransaction });
