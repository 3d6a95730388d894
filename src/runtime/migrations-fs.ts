// Edge file: reads sql/NNNN_name.sql from disk (node:fs works on Bun, Deno and Node): the package's own
// and, when an app's configuration names a folder (webhook-inbox.config.ts `migrations`), the app's.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Migration } from "../db/migrate.ts";

/**
 * The package's root: the nearest folder above this module holding `sql/0001_inbox.sql`. The same
 * code runs from `src/runtime/` in the repository and from the bundled `dist/` of the installed package.
 */
export const PACKAGE_ROOT = findPackageRoot(dirname(fileURLToPath(import.meta.url)));

/** The package's `sql/` folder. */
export const SQL_DIR = join(PACKAGE_ROOT, "sql");

function findPackageRoot(from: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (readable(join(dir, "sql", "0001_inbox.sql"))) return dir;
    if (dirname(dir) === dir) throw new Error(`Cannot find webhook-inbox's sql/ folder above ${from}`);
  }
}

/** Whether `file` exists; false where the runtime refuses to look (Deno allows reading only `sql/`). */
function readable(file: string): boolean {
  try {
    return existsSync(file);
  } catch {
    return false;
  }
}

/**
 * Loads every `NNNN_name.sql` in `dir`, sorted by number. Other files (a README) are left alone, but a
 * file that looks meant as a migration and would be skipped is refused.
 * @throws Error naming a file that ends in `.sql` (any case) or starts with four digits and an
 *   underscore but is not named `NNNN_name.sql` (lowercase, digits and underscores).
 */
export function loadMigrations(dir: string = SQL_DIR): Migration[] {
  return readdirSync(dir)
    .filter((name) => /\.sql$/i.test(name) || /^\d{4}_/.test(name))
    .sort()
    .map((name) => {
      const match = /^(\d{4})_[a-z0-9_]+\.sql$/.exec(name);
      if (!match?.[1]) throw new Error(`Cannot load migrations: ${name} is not named NNNN_name.sql`);
      return { version: Number(match[1]), name, sql: readFileSync(join(dir, name), "utf8") };
    });
}

let appMigrationsDir: string | undefined;

/**
 * Sets the app's migrations folder (absolute path) for this process: {@link loadAppMigrations} reads
 * it, and every command that migrates applies it after the package's (src/db/migrate.ts). Set once at
 * start by the `webhook-inbox` command from the app's configuration; undefined: no app migrations.
 */
export function useAppMigrations(dir: string | undefined): void {
  appMigrationsDir = dir;
}

/** The app's migrations folder set by {@link useAppMigrations}; undefined when none. */
export function appMigrationsFolder(): string | undefined {
  return appMigrationsDir;
}

/**
 * The app's own migrations ({@link useAppMigrations}), `NNNN_name.sql` numbered from 0001 on their own
 * and recorded apart (`app_schema_migrations`); empty when no folder is set.
 * @throws Error as {@link loadMigrations}, or when the folder set does not exist.
 */
export function loadAppMigrations(): Migration[] {
  if (appMigrationsDir === undefined) return [];
  if (!existsSync(appMigrationsDir)) throw new Error(`Cannot load the app's migrations: ${appMigrationsDir} does not exist`);
  return loadMigrations(appMigrationsDir);
}
