// Edge file: finds and imports an app's webhook-inbox.config.ts (node:fs, node:path, dynamic import)
// and makes it this process's configuration: handler tables, migrations folder, settings.
import { existsSync, statSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { AppConfigError, appHandlerTables, defineConfig, type AppConfig } from "../app-config.ts";
import { shippedHandlerTables, useHandlerTables } from "../receiver/endpoints.ts";
import { useAppMigrations } from "./migrations-fs.ts";

/** File names looked for, in this order, in the folder a command runs from when `--config` is not given. */
export const CONFIG_FILES = ["webhook-inbox.config.ts", "webhook-inbox.config.mjs", "webhook-inbox.config.js"] as const;

/** An app configuration as loaded: the file it came from (undefined: none found, the shipped configuration) and its content. */
export interface LoadedAppConfig {
  file: string | undefined;
  config: Readonly<AppConfig>;
}

/**
 * Loads the app's configuration: `path` (relative to `cwd`) when given, else the first of
 * {@link CONFIG_FILES} in `cwd` (under Node.js, which cannot import TypeScript, `.mjs` and `.js` first); none found gives the shipped configuration (`{}`). The module's
 * default export is checked with `defineConfig`.
 * @throws AppConfigError when `path` does not exist, the module has no default export, Node.js 20 is
 *   asked to load a `.ts` file (it cannot: use `.mjs`), or the configuration is refused by defineConfig;
 *   the module's own error when importing it fails.
 */
export async function loadAppConfig(path: string | undefined, cwd: string = process.cwd()): Promise<LoadedAppConfig> {
  // A runtime that cannot import TypeScript (Node.js 20) looks for the JavaScript configuration first.
  const names = typescriptRuns()
    ? CONFIG_FILES
    : [...CONFIG_FILES.filter((n) => !n.endsWith(".ts")), ...CONFIG_FILES.filter((n) => n.endsWith(".ts"))];
  const file = path !== undefined ? resolve(cwd, path) : names.map((name) => join(cwd, name)).find((f) => existsSync(f));
  if (file === undefined) return { file, config: {} };
  if (!existsSync(file)) throw new AppConfigError(`webhook-inbox: no configuration file at ${file} (--config)`);
  if (file.endsWith(".ts") && !typescriptRuns())
    throw new AppConfigError(
      `webhook-inbox: ${file} is TypeScript, which Node.js ${process.version} cannot import; run the command with Bun, or write the configuration as webhook-inbox.config.mjs`,
    );
  const module = (await import(pathToFileURL(file).href)) as { default?: AppConfig };
  if (module.default === undefined)
    throw new AppConfigError(`webhook-inbox: ${file} has no default export (export default defineConfig({ … }))`);
  return { file, config: defineConfig(module.default) };
}

/**
 * Makes `loaded` this process's configuration, before any command module loads: the handler tables
 * ({@link appHandlerTables} into `useHandlerTables`), the app's migrations folder (`migrations`
 * relative to the file, default `migrations` beside it when that folder exists) and each of
 * `settings` into `env` where `env` does not already set it.
 * @throws HandlerTableError from appHandlerTables; AppConfigError when a `migrations` folder that the
 *   configuration names does not exist.
 */
export function applyAppConfig(loaded: LoadedAppConfig, env: Record<string, string | undefined>): void {
  const { file, config } = loaded;
  useHandlerTables(appHandlerTables(shippedHandlerTables, config));
  if (file !== undefined) {
    const base = dirname(file);
    const named = config.migrations !== undefined;
    const dir = isAbsolute(config.migrations ?? "") ? (config.migrations as string) : join(base, config.migrations ?? "migrations");
    if (named && !(existsSync(dir) && statSync(dir).isDirectory()))
      throw new AppConfigError(`webhook-inbox config: migrations folder ${dir} does not exist`);
    useAppMigrations(existsSync(dir) ? dir : undefined);
  }
  for (const [name, value] of Object.entries(config.settings ?? {})) if (env[name] === undefined || env[name] === "") env[name] = value;
}

/** Whether this runtime imports TypeScript modules (Bun, Deno), unlike Node.js 20. */
function typescriptRuns(): boolean {
  return typeof (globalThis as { Bun?: unknown }).Bun !== "undefined" || "Deno" in globalThis;
}
