import { PermanentError } from "../errors.ts";
import type { Subject, WebhookProvider } from "./provider.ts";
import { adyenProvider } from "./adyen.ts";
import { gitHubProvider } from "./github.ts";
import { paddleProvider } from "./paddle.ts";
import { shopifyProvider } from "./shopify.ts";
import { standardWebhooksProvider } from "./standard-webhooks.ts";
import { stripeProvider } from "./stripe.ts";
import { stripeThinProvider } from "./stripe-thin.ts";

/**
 * Every provider this service knows, by the name stored in the inbox's `provider` column. The worker,
 * replay and the handler registration find a stored row's provider here; adding a provider is its
 * file plus one line below, keyed by its `name` (a contract test checks they agree).
 */
export const providers = {
  stripe: stripeProvider,
  "stripe-thin": stripeThinProvider,
  "standard-webhooks": standardWebhooksProvider,
  github: gitHubProvider,
  shopify: shopifyProvider,
  paddle: paddleProvider,
  adyen: adyenProvider,
} as const satisfies Record<string, WebhookProvider>;

/** A registered provider's name. */
export type ProviderName = keyof typeof providers;

/** The registered provider called `name` (an inbox row's `provider`), or undefined. */
export function providerNamed(name: string): WebhookProvider | undefined {
  return Object.hasOwn(providers, name) ? providers[name as ProviderName] : undefined;
}

/**
 * The subject of a stored event of provider `name` ({@link WebhookProvider.subject}).
 * @throws PermanentError when no provider of that name is registered, or the envelope has no subject.
 */
export function subjectOf(name: string, payload: Record<string, unknown>): Subject {
  const provider = providerNamed(name);
  if (!provider) throw new PermanentError(`Cannot read event: no provider named "${name}" is registered (src/providers/registry.ts)`);
  return provider.subject(payload);
}
