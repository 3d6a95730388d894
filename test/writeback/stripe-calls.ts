// The provider calls the write-back tests make, through the real stripe-node client pointed at the
// fake Stripe server (test/writeback/fake-stripe.ts). Parameters are derived from the event only, so a
// repeated call with the same idempotency key is the same request.
import Stripe from "stripe";
import type { WriteBackResult } from "../../src/writeback/write-back-once.ts";

/** stripe-node against the fake on 127.0.0.1:`port`, over http, without its own network retries. */
export function stripeClient(port: number): Stripe {
  return new Stripe("sk_test_writeback_fake", { host: "127.0.0.1", port, protocol: "http", maxNetworkRetries: 0 });
}

/** Sets `metadata.last_event` on a customer, sending `idempotencyKey` as Stripe's Idempotency-Key. */
export async function updateCustomerMetadata(
  stripe: Stripe,
  customerId: string,
  eventId: string,
  idempotencyKey: string,
): Promise<WriteBackResult> {
  const customer = await stripe.customers.update(customerId, { metadata: { last_event: eventId } }, { idempotencyKey });
  return { id: customer.id, details: { object: customer.object } };
}

/** Sets `metadata.ledger_booked` on an invoice (the outbox handler's write-back). */
export async function markInvoiceBooked(stripe: Stripe, invoiceId: string, idempotencyKey: string): Promise<WriteBackResult> {
  const invoice = await stripe.invoices.update(invoiceId, { metadata: { ledger_booked: "true" } }, { idempotencyKey });
  return { id: invoice.id as string, details: { object: invoice.object } };
}
