import type { Tx } from "../db/db.ts";
import { handlerTable, PermanentError, type HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";

/**
 * Shopify `orders/paid` (shopify.dev, webhook topics, orders/paid): when the order itself says
 * `financial_status` `paid`, writes one `ShopifyOrderPaid` outbox message `{ order, name, currency,
 * total_price, event_id }` for the order's `admin_graphql_api_id`; any other status books nothing.
 * `total_price` stays Shopify's decimal string in major units. Shopify signs the body only, not the
 * topic or `X-Shopify-Event-Id` (the inbox key), so both the decision and the key are the body's: a body
 * sent under another topic books only if it says paid, and a captured one resent under a fresh event id
 * writes nothing again (one message id per order: {@link insertOutbox}). Runs inside the inbox transaction.
 * @throws PermanentError when the payload has no admin_graphql_api_id, currency or total_price.
 */
export async function recordOrderPaid(tx: Tx, order: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const { admin_graphql_api_id: gid, currency, total_price: total, name } = order;
  if (typeof gid !== "string" || typeof currency !== "string" || typeof total !== "string" || !/^\d+(\.\d+)?$/.test(total))
    throw new PermanentError("Cannot record Shopify order paid: admin_graphql_api_id, currency and a decimal total_price are required");
  if (order.financial_status !== "paid") return;
  const payload = { order: gid, name: typeof name === "string" ? name : null, currency, total_price: total, event_id: context.eventId };
  await insertOutbox(tx, { account: "", aggregate: ["ShopifyOrder", gid], eventType: "ShopifyOrderPaid", messageKey: "" }, payload);
}

/** The Shopify example handler table: `orders/paid` (see {@link recordOrderPaid}); other topics are recorded `ignored`. */
export const shopifyHandlers = handlerTable({ "orders/paid": recordOrderPaid });
