import type { Endpoint } from "./app.ts";
import type { EndpointSettings } from "../config.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import type { Mode } from "./receive.ts";
import { stripeHandlers } from "../handlers/stripe-money.ts";
import type { ProviderName } from "../providers/registry.ts";
import { stripeProvider } from "../providers/stripe.ts";

/**
 * The handler table each registered provider's rows feed, one line per provider that has handlers
 * (every Stripe endpoint feeds the Stripe handlers: billing and money going out). The one place a
 * table is chosen: the receiver ({@link stripeEndpoints}), the worker and replay ({@link handlersFor})
 * all read it here. A provider without a line has its rows parked by the worker.
 */
export const handlerTables = {
  stripe: stripeHandlers,
} as const satisfies Readonly<Partial<Record<ProviderName, HandlerTable>>>;

/**
 * Wires configured Stripe endpoints to the Stripe provider and its handler table (invoices and money
 * going out). The first (`billing`) is also served at `/webhooks/stripe`; every endpoint at
 * `/webhooks/stripe/<name>`.
 * `mode` defaults to sync; `hybridBudgetMs` is the hybrid in-request budget in ms.
 */
export function stripeEndpoints(
  settings: readonly (Pick<EndpointSettings, "name" | "secrets"> & { mode?: Mode })[],
  hybridBudgetMs = 2_000,
): Endpoint[] {
  return settings.map((s, i) => ({
    name: s.name,
    provider: stripeProvider,
    secrets: s.secrets,
    handlers: handlerTables.stripe,
    isDefault: i === 0,
    mode: s.mode ?? "sync",
    hybrid: { budgetMs: hybridBudgetMs, backoff: { baseMs: 1_000, capMs: 600_000 } },
  }));
}

/** The handler table for rows of `provider` (an inbox row's `provider`), for the worker and replay; undefined when none is registered. */
export function handlersFor(provider: string): HandlerTable | undefined {
  const tables: Readonly<Partial<Record<ProviderName, HandlerTable>>> = handlerTables;
  return Object.hasOwn(tables, provider) ? tables[provider as ProviderName] : undefined;
}
