// The importable core of webhook-inbox (package.json `exports` "."): what a team's own Bun or Node.js app needs to receive, apply and work off webhooks in its own process. Web
// APIs only; loading the sql/ migrations from disk is the separate "webhook-inbox/migrations" entry.
export { createApp, type App, type AppDeps, type Endpoint } from "./receiver/app.ts";
export {
  handlersFor,
  handlerTables,
  shippedHandlerTables,
  useHandlerTables,
  type HandlerTables,
  migratingHandlersFor,
  providerEndpoints,
  stripeEndpoints,
  thinHandlers,
  workerHandlerTables,
} from "./receiver/endpoints.ts";
export type { HybridOptions, Mode, Outcome } from "./receiver/receive.ts";
export {
  handlerTable,
  HandlerTableError,
  PermanentError,
  type Handler,
  type HandlerContext,
  type HandlerTable,
} from "./handlers/handler-table.ts";
export { applyEvent, type Applied, type ApplyInput, type Hold } from "./inbox/apply-event.ts";
export { eventCreatedAt } from "./handlers/event-created.ts";
export { billingHandlers } from "./handlers/billing.ts";
export { stripeHandlers } from "./handlers/stripe-money.ts";
export { runWorker, type WorkerOptions } from "./worker/worker.ts";
export { providerNamed, providers, subjectOf, type ProviderName } from "./providers/registry.ts";
export type { Subject, VerifiedEvent, VerifyInput, WebhookProvider } from "./providers/provider.ts";
export { signStripePayload, stripeProvider, stripeSubject } from "./providers/stripe.ts";
export { standardWebhooksProvider } from "./providers/standard-webhooks.ts";
export { gitHubProvider, signGitHubPayload } from "./providers/github.ts";
export { shopifyProvider, signShopifyPayload } from "./providers/shopify.ts";
export { paddleProvider, signPaddlePayload } from "./providers/paddle.ts";
export { adyenProvider, signAdyenItem } from "./providers/adyen.ts";
export { stripeThinProvider, type ThinNotification } from "./providers/stripe-thin.ts";
export { changeOnce, changeOnceTable } from "./handlers/change-once.ts";
export { insertOutbox, type OutboxFact } from "./handlers/insert-outbox.ts";
export { connect, type ConnectOptions, type Db, type Tx } from "./db/db.ts";
export { assertPatchedPostgres } from "./db/patched-postgres.ts";
export { migrate, schemaStatus, type Migration, type SchemaStatus } from "./db/migrate.ts";
export { appHandlerTables, AppConfigError, defineConfig, type AppConfig } from "./app-config.ts";
export { PACKAGE_VERSION } from "./version.ts";
export { AppError, type ErrorCode } from "./errors.ts";
