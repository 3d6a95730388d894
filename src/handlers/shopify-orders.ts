import type { Tx } from "../db/db.ts";
import { handlerTable, PermanentError, type HandlerContext } from "./handler-table.ts";

/**
 * Shopify `orders/paid` (shopify.dev, webhook topics, orders/paid): writes one `ShopifyOrderPaid`
 * outbox message `{ order, name, currency, total_price, event_id }` keyed by the order's
 * `admin_graphql_api_id`. `total_price` stays Shopify's decimal string in major units. Once per order:
 * Shopify sends one orders/paid event per payment, and every delivery of it carries the same
 * `X-Shopify-Event-Id`, the inbox key. Runs inside the inbox transaction.
 * @throws PermanentError when the payload has no admin_graphql_api_id, currency or total_price.
 */
export async function recordOrderPaid(tx: Tx, order: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const { admin_graphql_api_id: gid, currency, total_price: total, name } = order;
  if (typeof gid !== "string" || typeof currency !== "string" || typeof total !== "string" || !/^\d+(\.\d+)?$/.test(total))
    throw new PermanentError("Cannot record Shopify order paid: admin_graphql_api_id, currency and a decimal total_price are required");
  await tx`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload)
    values ('ShopifyOrder', ${gid}, 'ShopifyOrderPaid',
            jsonb_build_object('order', ${gid}::text, 'name', ${typeof name === "string" ? name : null}::text,
                               'currency', ${currency}::text, 'total_price', ${total}::text, 'event_id', ${context.eventId}::text))
  `;
}

/** The Shopify example handler table: `orders/paid` (see {@link recordOrderPaid}); other topics are recorded `ignored`. */
export const shopifyHandlers = handlerTable({ "orders/paid": recordOrderPaid });
