import type { Endpoint } from "./app.ts";
import { ConfigError, type EndpointSettings, type ProviderEndpointSettings } from "../config.ts";
import { adyenHandlers } from "../handlers/adyen-payments.ts";
import { gitHubHandlers } from "../handlers/github-pushes.ts";
import { paddleHandlers } from "../handlers/paddle-transactions.ts";
import { shopifyHandlers } from "../handlers/shopify-orders.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import type { Mode } from "./receive.ts";
import { stripeHandlers } from "../handlers/stripe-money.ts";
import { providerNamed, type ProviderName } from "../providers/registry.ts";
import { stripeProvider } from "../providers/stripe.ts";
import { stripeThinProvider } from "../providers/stripe-thin.ts";
import { changeOnceTable } from "../handlers/change-once.ts";
import { thinHandlerTable } from "../handlers/stripe-thin.ts";

/**
 * The handler tables this package ships, by inbox provider (every Stripe endpoint feeds the Stripe
 * handlers: billing and money going out). A provider without a line has its rows parked by the worker.
 */
export const shippedHandlerTables = {
  stripe: stripeHandlers,
  github: gitHubHandlers,
  shopify: shopifyHandlers,
  paddle: paddleHandlers,
  adyen: adyenHandlers,
} as const satisfies Readonly<Partial<Record<ProviderName, HandlerTable>>>;

/** Handler tables by inbox provider: `stripe` always present (empty when an app replaced it with none). */
export type HandlerTables = { readonly stripe: HandlerTable } & Readonly<Record<string, HandlerTable>>;

/**
 * The handler tables this process runs, by inbox provider: {@link shippedHandlerTables} unless the
 * app's configuration changed them at start ({@link useHandlerTables}). The one place a table is
 * chosen: the receiver ({@link stripeEndpoints}), the worker and replay ({@link handlersFor}) all read
 * it here (an ES module live binding: importers see the table set at start).
 */
export let handlerTables: HandlerTables = shippedHandlerTables;

/** The Stripe table with every handler claiming its change (handlers/change-once.ts). */
let stripeChangeOnce = changeOnceTable(handlerTables.stripe);

/**
 * Sets the handler tables of this process (by inbox provider, e.g. `{ stripe, github }`), in place of
 * the shipped ones, and the tables derived from the Stripe one (change-once, thin). Called once at start
 * by the `webhook-inbox` command with the app's configuration (src/app-config.ts `appHandlerTables`),
 * before any endpoint, worker or replay reads them. Each table is one built by `handlerTable()`.
 */
export function useHandlerTables(tables: Readonly<Record<string, HandlerTable>>): void {
  handlerTables = Object.freeze({ ...tables, stripe: tables.stripe ?? Object.freeze({}) });
  stripeChangeOnce = changeOnceTable(handlerTables.stripe);
  thinHandlers = thinHandlerTable(handlerTables.stripe);
}

/**
 * Wires configured Stripe endpoints to the Stripe provider and its handler table (invoices and money
 * going out). The first (`billing`) is also served at `/webhooks/stripe`; every endpoint at
 * `/webhooks/stripe/<name>`.
 * `mode` defaults to sync; `hybridBudgetMs` is the hybrid in-request budget in ms.
 */
export function stripeEndpoints(
  settings: readonly (Pick<EndpointSettings, "name" | "secrets" | "kind"> &
    Partial<Pick<EndpointSettings, "livemode" | "connect">> & { mode?: Mode })[],
  hybridBudgetMs = 2_000,
): Endpoint[] {
  // While thin endpoints run next to classic ones (a migration), classic events claim their change too,
  // so a classic and a thin event of one change apply once in any order (handlers/change-once.ts).
  const classic = settings.some((s) => s.kind === "thin") ? stripeChangeOnce : handlerTables.stripe;
  return settings.map((s, i) => ({
    name: s.name,
    provider: s.kind === "thin" ? stripeThinProvider : stripeProvider,
    route: "stripe",
    secrets: s.secrets,
    handlers: s.kind === "thin" ? thinHandlers : classic,
    isDefault: i === 0,
    // A thin endpoint is async by nature: the worker fetches what a notification points to.
    mode: s.kind === "thin" ? "async" : (s.mode ?? "sync"),
    hybrid: { budgetMs: hybridBudgetMs, backoff: { baseMs: 1_000, capMs: 600_000 } },
    ...(s.livemode === undefined ? {} : { livemode: s.livemode }),
    ...(s.connect ? { connect: true } : {}),
  }));
}

/**
 * Wires `WEBHOOK_ENDPOINTS` (config.ts {@link ProviderEndpointSettings}) to their registered providers
 * and handler tables ({@link handlersFor}; a provider without a table has every event recorded
 * `ignored`, kept for a table added later and replay). Served at `/webhooks/<provider>/<name>`, the first
 * endpoint of each provider at `/webhooks/<provider>` too. `hybridBudgetMs` is the hybrid in-request budget.
 * @throws ConfigError listing every endpoint whose provider is not registered or whose secret the
 *   provider refuses (`WebhookProvider.secretProblem`; the secret is never echoed).
 */
export function providerEndpoints(settings: readonly ProviderEndpointSettings[], hybridBudgetMs = 2_000): Endpoint[] {
  const problems: string[] = [];
  const endpoints: Endpoint[] = [];
  for (const s of settings) {
    const provider = providerNamed(s.provider);
    if (!provider || s.provider === "stripe" || s.provider === "stripe-thin") {
      problems.push(
        `WEBHOOK_ENDPOINTS entry "${s.provider}/${s.name}": no provider named "${s.provider}" is registered (src/providers/registry.ts)`,
      );
      continue;
    }
    s.secrets.forEach((secret, i) => {
      const problem = provider.secretProblem?.(secret);
      if (problem) problems.push(`${s.source} value ${i + 1} of ${s.secrets.length} ${problem}`);
    });
    endpoints.push({
      name: s.name,
      provider,
      secrets: s.secrets,
      handlers: handlersFor(s.provider) ?? {},
      isDefault: !endpoints.some((e) => e.provider === provider),
      mode: s.mode,
      hybrid: { budgetMs: hybridBudgetMs, backoff: { baseMs: 1_000, capMs: 600_000 } },
      ...(s.toleranceSec === undefined ? {} : { toleranceSec: s.toleranceSec }),
    });
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return endpoints;
}

/**
 * The handler table of thin endpoints (handlers/stripe-thin.ts): `v1.<type>` for every Stripe handler's
 * `<type>`, claiming its change, and the health type that requests an event backfill. The receiver
 * records the types it has as work for the worker (others `ignored`); the worker reads each
 * notification's object from the API and runs these handlers on it.
 */
export let thinHandlers: HandlerTable = thinHandlerTable(handlerTables.stripe);

/**
 * The handler tables a worker claims rows for, by inbox provider: every table of {@link handlerTables}
 * (GitHub, Shopify, Paddle, Adyen too), classic Stripe rows with the change-once table next to thin
 * endpoints (as the receiver's classic endpoints use then), and thin rows. A worker without Stripe API settings leaves thin rows alone (worker.ts).
 */
export function workerHandlerTables(thinEndpoints: boolean): Readonly<Record<string, HandlerTable>> {
  return { ...handlerTables, stripe: thinEndpoints ? stripeChangeOnce : handlerTables.stripe, [stripeThinProvider.name]: thinHandlers };
}

/**
 * {@link handlersFor} for a worker next to thin endpoints: Stripe rows get the change-once table, as the
 * receiver's classic endpoints do then ({@link stripeEndpoints}).
 */
export function migratingHandlersFor(provider: string): HandlerTable | undefined {
  return provider === "stripe" ? stripeChangeOnce : handlersFor(provider);
}

/** The handler table for rows of `provider` (an inbox row's `provider`), for the worker and replay; undefined when none is registered. */
export function handlersFor(provider: string): HandlerTable | undefined {
  return Object.hasOwn(handlerTables, provider) ? handlerTables[provider] : undefined;
}
