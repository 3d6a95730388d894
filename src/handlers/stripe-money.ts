import { billingHandlers } from "./billing.ts";
import { checkoutHandlers } from "./checkout.ts";
import { dunningHandlers } from "./dunning.ts";
import { subscriptionHandlers } from "./subscriptions.ts";
import { recordCharge } from "./charges.ts";
import { applyDispute } from "./disputes.ts";
import { handlerTable } from "./handler-table.ts";
import { recordInvoicePayment } from "./invoice-payments.ts";
import { applyRefund } from "./refunds.ts";

/**
 * Money going out, by Stripe event type: refunds, disputes, and the events that link them to an invoice
 * (invoice_payment.paid, charge.*). Plain `(tx, object, context)` handlers: each runs in the inbox
 * transaction, books every money movement once by its balance transaction, and is order-independent.
 */
export const moneyOutHandlers = handlerTable({
  "invoice_payment.paid": recordInvoicePayment,
  "charge.succeeded": recordCharge,
  "charge.captured": recordCharge,
  "charge.refunded": recordCharge,
  "refund.created": applyRefund,
  "refund.updated": applyRefund,
  "refund.failed": applyRefund,
  "charge.refund.updated": applyRefund,
  "charge.dispute.created": applyDispute,
  "charge.dispute.updated": applyDispute,
  "charge.dispute.closed": applyDispute,
  "charge.dispute.funds_withdrawn": applyDispute,
  "charge.dispute.funds_reinstated": applyDispute,
});

/**
 * Every Stripe handler the receiver and the worker run: the invoice lifecycle and its dunning, money
 * going out, Checkout fulfilment and subscriptions.
 */
export const stripeHandlers = handlerTable(billingHandlers, dunningHandlers, moneyOutHandlers, checkoutHandlers, subscriptionHandlers);
