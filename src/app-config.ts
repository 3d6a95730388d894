// An app's webhook-inbox configuration (the default export of its `webhook-inbox.config.ts`): its
// handler tables, its migrations folder and its settings. Types and checks only; reading the file is
// the edge's (runtime/app-config-file.ts).
import { handlerTable, HandlerTableError, type HandlerTable } from "./handlers/handler-table.ts";

/** What an app's `webhook-inbox.config.ts` exports by default; build it with {@link defineConfig}. */
export interface AppConfig {
  /**
   * The app's handler tables by inbox provider (`stripe`, `github`, `shopify`, `paddle`, `adyen`, or
   * another registered provider), each built with `handlerTable()`. Added to the shipped table of the
   * same provider (an event type both define is refused at start with HandlerTableError) unless
   * {@link replaceHandlers}. A handler is `(tx, object, context)`: it runs inside the inbox row's
   * transaction and must be idempotent (seed §5, README "Writing a handler").
   */
  handlers?: Readonly<Record<string, HandlerTable>>;
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
const SETTING_NAME = /^[A-Z][A-Z0-9_]*$/;

/**
 * Checks an app's configuration and returns it frozen: for `export default defineConfig({ … })`.
 * @throws AppConfigError on an unknown field, a handler table that is not an object of functions, a
 *   `migrations` that is not a relative path, or a setting that is not a string, not named like an
 *   environment variable, or a secret.
 */
export function defineConfig(config: AppConfig): Readonly<AppConfig> {
  if (typeof config !== "object" || config === null) throw new AppConfigError("webhook-inbox config: the default export must be an object");
  for (const key of Object.keys(config))
    if (!KEYS.has(key)) throw new AppConfigError(`webhook-inbox config: unknown field "${key}" (fields: ${[...KEYS].join(", ")})`);
  for (const [provider, table] of Object.entries(config.handlers ?? {})) {
    if (typeof table !== "object" || table === null)
      throw new AppConfigError(`webhook-inbox config: handlers.${provider} must be a handler table (handlerTable({ "type": handler }))`);
    handlerTable(table); // checks every event type and handler
  }
  if (config.replaceHandlers !== undefined && typeof config.replaceHandlers !== "boolean")
    throw new AppConfigError("webhook-inbox config: replaceHandlers must be true or false");
  if (config.migrations !== undefined && (typeof config.migrations !== "string" || config.migrations === "" || config.migrations.startsWith("/")))
    throw new AppConfigError("webhook-inbox config: migrations must be a folder relative to the configuration file, e.g. \"migrations\"");
  for (const [name, value] of Object.entries(config.settings ?? {})) {
    if (!SETTING_NAME.test(name)) throw new AppConfigError(`webhook-inbox config: settings.${name} is not an environment variable name`);
    if (SECRET_NAME.test(name))
      throw new AppConfigError(`webhook-inbox config: settings.${name} is a secret; set it in the environment, not in the configuration file`);
    if (typeof value !== "string") throw new AppConfigError(`webhook-inbox config: settings.${name} must be a string`);
  }
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
        throw new HandlerTableError(`${err.message} (the app's handlers.${provider} and the shipped table; set replaceHandlers: true to run only yours)`);
      throw err;
    }
  }
  return tables;
}
