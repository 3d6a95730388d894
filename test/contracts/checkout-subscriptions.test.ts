// The Stripe handler table passes the handler table contract with the checkout/ and subscriptions/
// fixtures (each set's README gives the end state checked here): every mode, redeliveries, replay and
// any order with duplicates end in the same rows.
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { signStripePayload, stripeProvider } from "../../src/providers/stripe.ts";
import {
  CHECKOUT_END_STATE,
  checkoutEvents,
  checkoutState,
  SUBSCRIPTION_END_STATE,
  subscriptionEvents,
  subscriptionState,
} from "../support/checkout-subscriptions.ts";
import { handlerTableSuite } from "./handler-table-suite.ts";

async function signStripe(body: string, secret: string, timestampSec: number): Promise<Record<string, string>> {
  return { "stripe-signature": await signStripePayload(body, secret, timestampSec) };
}

handlerTableSuite({
  name: "stripe: Checkout fulfilment (paid, async succeeded, async failed, expired)",
  handlers: stripeHandlers,
  provider: stripeProvider,
  sign: signStripe,
  events: checkoutEvents(),
  endState: checkoutState,
  expected: CHECKOUT_END_STATE,
});

handlerTableSuite({
  name: "stripe: subscriptions (trial → active → past_due → active → canceled; paused → resumed) and dunning",
  handlers: stripeHandlers,
  provider: stripeProvider,
  sign: signStripe,
  events: subscriptionEvents(),
  endState: subscriptionState,
  expected: SUBSCRIPTION_END_STATE,
});
