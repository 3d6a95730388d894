// An app's webhook-inbox configuration (the default export of its `webhook-inbox.config.ts`): its
// handler tables, its migrations folder and its settings. Types and checks only; reading the file is
// the edge's (runtime/app-config-file.ts).
import { handlerTable, HandlerTableError, type HandlerTable } from "./handlers/handler-table.ts";
import { providers, type ProviderName } from "./providers/registry.ts";

/**
 * An inbox provider an app can give a handler table: every registered provider but `stripe-thin` (thin
 * events are applied through the Stripe table: docs/stripe-thin-events.md).
 */
export type AppProvider = Exclude<ProviderName, "stripe-thin">;

/** The {@link AppProvider} names, for the check and its message. */
const APP_PROVIDERS: readonly string[] = Object.keys(providers).filter((name) => name !== "stripe-thin");

/** What an app's `webhook-inbox.config.ts` exports by default; build it with {@link defineConfig}. */
export interface AppConfig {
  /**
   * The app's handler tables by inbox provider (`stripe`, `github`, `shopify`, `paddle`, `adyen`,
   * `standard-webhooks`: {@link AppProvider}), each built with `handlerTable()`; another name is refused
   * (a misspelt provider would leave its events `ignored`). Added to the shipped table of the
   * same provider (an event type both define is refused at start with HandlerTableError) unless
   * {@link replaceHandlers}. A handler is `(tx, object, context)`: it runs inside the inbox row's
   * transaction and must be idempotent (seed §5, README "Writing a handler").
   */
  handlers?: Readonly<Partial<Record<AppProvider, HandlerTable>>>;
  /**
   * `true`: the app's tables are the only ones; the shipped handlers (invoices, ledger, refunds,
   * disputes, …) are not run, and a provider the app names no table for records its events
   * `ignored`. Default `false`.
   */
  replaceHandlers?: boolean;
  /**
   * The app's migrations folder, relative to the configuration file: `NNNN_name.sql` numbered from 0001
   * on their own, applied after the package's in one transaction and recorded apart
   * (`app_schema_migrations`). Default `migrations` when that folder exists.
   */
  migrations?: string;
  /**
   * Settings by environment variable name (`STRIPE_ENDPOINTS`, `INBOX_MODE`, `PORT`, `WEBHOOK_ENDPOINTS`, …,
   * as README "Settings" lists them), each used where the process environment does not set it.
   * Secrets are refused here (names with SECRET, TOKEN, PASSWORD or API_KEY, and DATABASE_URL): they
   * belong in the environment, not in a file under version control.
   */
  settings?: Readonly<Record<string, string>>;
}

/** A configuration that cannot be used as given: the message names the field and what is wrong. */
export class AppConfigError extends Error {
  override name = "AppConfigError";
}

const KEYS = new Set(["handlers", "replaceHandlers", "migrations", "settings"]);
const SECRET_NAME = /SECRET|TOKEN|PASSWORD|API_KEY|^DATABASE_URL$/;
/** Values that are secrets whatever their name: Stripe signing secrets and API keys, Standard Webhooks secrets, a URL with a password. */
const SECRET_VALUE = /^(whsec_|sk_(test|live)_|rk_(test|live)_)|:\/\/[^/@\s]*:[^/@\s]*@/;

/**
 * The settings webhook-inbox reads (docs/configuration.md lists each; a test holds the two together),
 * but secrets, which `settings` refuses anyway.
 */
export const SETTING_NAMES: ReadonlySet<string> = new Set([
  "NODE_ENV",
  "LOG_LEVEL",
  "OTEL_SDK_DISABLED",
  "DATABASE_POOLER",
  "DATABASE_WAIT_MS",
  "EMBEDDED_PG_DIR",
  "EMBEDDED_PG_PORT",
  "MIGRATE_ON_START",
  "OUTBOX_SINK_URL",
  "OUTBOX_ORDERED",
  "STRIPE_ENDPOINTS",
  "INBOX_MODE",
  "STRIPE_ENDPOINT_KIND",
  "INBOX_REFETCH",
  "STRIPE_MODE",
  "STRIPE_CONNECT",
  "STRIPE_API_REQUESTS_PER_SEC",
  "STRIPE_API_BASE",
  "STRIPE_TOLERANCE_SEC",
  "STATEMENT_TIMEOUT_MS",
  "HYBRID_BUDGET_MS",
  "DB_POOL_MAX",
  "QUEUE_TIMEOUT_MS",
  "WEBHOOK_ENDPOINTS",
  "MAX_BODY_BYTES",
  "MAX_INFLIGHT_BODY_BYTES",
  "PORT",
  "HOST",
  "ADMIN_READONLY",
  "RECONCILE_IDLE_AFTER",
  "RECONCILE_EVERY",
  "FAILOVER_CHECK_MS",
  "FAILOVER_BACKFILL_MARGIN",
  "GITHUB_API_BASE",
]);

/**
 * Prefixes of the per-endpoint settings (`INBOX_MODE_<NAME>`, …), of the worker's and the dispatcher's
 * options (`WORKER_<OPTION>`, `OUTBOX_<OPTION>`) and of OpenTelemetry's own variables (`OTEL_…`).
 */
export const SETTING_PREFIXES: readonly string[] = [
  "INBOX_MODE_",
  "STRIPE_ENDPOINT_KIND_",
  "INBOX_REFETCH_",
  "STRIPE_MODE_",
  "STRIPE_CONNECT_",
  "WEBHOOK_TOLERANCE_SEC_",
  "GITHUB_HOOK_",
  "WORKER_",
  "OUTBOX_",
  "OTEL_",
];
const SETTING_NAME = /^[A-Z][A-Z0-9_]*$/;

/** Whether `name` is a setting webhook-inbox reads ({@link SETTING_NAMES}, {@link SETTING_PREFIXES}). */
export function isKnownSetting(name: string): boolean {
  return SETTING_NAMES.has(name) || SETTING_PREFIXES.some((prefix) => name.startsWith(prefix) && name.length > prefix.length);
}

/**
 * Checks an app's configuration and returns it frozen: for `export default defineConfig({ … })`.
 * @throws AppConfigError on an unknown field, a handler table under a name that is not an
 *   {@link AppProvider}, a handler table that is not an object of functions, a
 *   `migrations` that is not a relative path; settings that are not strings, not named like an
 *   environment variable, not a setting webhook-inbox reads ({@link isKnownSetting}: a misspelt one would
 *   be ignored), or secrets (by name, or by value: `whsec_…`, `sk_…`, `rk_…`, a URL with a password):
 *   all of these in one error, one line each.
 */
export function defineConfig(config: AppConfig): Readonly<AppConfig> {
  if (typeof config !== "object" || config === null) throw new AppConfigError("webhook-inbox config: the default export must be an object");
  for (const key of Object.keys(config))
    if (!KEYS.has(key)) throw new AppConfigError(`webhook-inbox config: unknown field "${key}" (fields: ${[...KEYS].join(", ")})`);
  for (const [provider, table] of Object.entries(config.handlers ?? {})) {
    if (!APP_PROVIDERS.includes(provider))
      throw new AppConfigError(
        `webhook-inbox config: handlers.${provider}: no inbox provider is called "${provider}" (providers: ${APP_PROVIDERS.join(", ")}); its events would be recorded ignored`,
      );
    if (typeof table !== "object" || table === null)
      throw new AppConfigError(`webhook-inbox config: handlers.${provider} must be a handler table (handlerTable({ "type": handler }))`);
    handlerTable(table); // checks every event type and handler
  }
  if (config.replaceHandlers !== undefined && typeof config.replaceHandlers !== "boolean")
    throw new AppConfigError("webhook-inbox config: replaceHandlers must be true or false");
  if (
    config.migrations !== undefined &&
    (typeof config.migrations !== "string" || config.migrations === "" || config.migrations.startsWith("/"))
  )
    throw new AppConfigError('webhook-inbox config: migrations must be a folder relative to the configuration file, e.g. "migrations"');
  const problems: string[] = [];
  for (const [name, value] of Object.entries(config.settings ?? {})) {
    if (!SETTING_NAME.test(name)) problems.push(`settings.${name} is not an environment variable name`);
    else if (SECRET_NAME.test(name) || (typeof value === "string" && SECRET_VALUE.test(value)))
      problems.push(`settings.${name} is a secret; set it in the environment, not in the configuration file`);
    else if (!isKnownSetting(name))
      problems.push(`settings.${name} is not a setting webhook-inbox reads (docs/configuration.md lists them)`);
    else if (typeof value !== "string") problems.push(`settings.${name} must be a string`);
  }
  if (problems.length === 1) throw new AppConfigError(`webhook-inbox config: ${problems[0]}`);
  if (problems.length > 1) throw new AppConfigError(`webhook-inbox config:\n${problems.map((p) => `  ${p}`).join("\n")}`);
  return Object.freeze({ ...config });
}

/**
 * The handler tables an app runs: `shipped` with each of `config.handlers` added to the table of its
 * provider (`handlerTable(shipped, app)`), or, with `replaceHandlers`, the app's tables alone.
 * @throws HandlerTableError naming an event type that the app's table and the shipped one both define.
 */
export function appHandlerTables(
  shipped: Readonly<Record<string, HandlerTable>>,
  config: Readonly<AppConfig>,
): Record<string, HandlerTable> {
  const app = config.handlers ?? {};
  if (config.replaceHandlers) return Object.fromEntries(Object.entries(app).map(([p, t]) => [p, handlerTable(t)]));
  const tables: Record<string, HandlerTable> = { ...shipped };
  for (const [provider, table] of Object.entries(app)) {
    try {
      tables[provider] = handlerTable(shipped[provider] ?? {}, table);
    } catch (err) {
      if (err instanceof HandlerTableError)
        throw new HandlerTableError(
          `${err.message} (the app's handlers.${provider} and the shipped table; set replaceHandlers: true to run only yours)`,
        );
      throw err;
    }
  }
  return tables;
}
