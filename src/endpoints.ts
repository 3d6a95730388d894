import type { Endpoint } from "./app.ts";
import type { EndpointSettings } from "./config.ts";
import { billingHandlers } from "./handlers/billing.ts";
import { stripeProvider } from "./stripe-event.ts";

/**
 * Wires configured Stripe endpoints to the Stripe provider and the billing handler table. The first
 * (`billing`) is also served at `/webhooks/stripe`; every endpoint at `/webhooks/stripe/<name>`.
 */
export function stripeEndpoints(settings: readonly EndpointSettings[]): Endpoint[] {
  return settings.map((s, i) => ({
    name: s.name,
    provider: stripeProvider,
    secrets: s.secrets,
    handlers: billingHandlers,
    isDefault: i === 0,
  }));
}
