// Edge file: reads sql/NNNN_name.sql from disk (node:fs works on Bun, Deno and Node).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Migration } from "../db/migrate.ts";

/** The repository's `sql/` folder. */
export const SQL_DIR = fileURLToPath(new URL("../../sql/", import.meta.url));

/**
 * Loads every `NNNN_name.sql` in `dir`, sorted by number.
 * @throws Error naming a `.sql` file whose name does not start with four digits and an underscore.
 */
export function loadMigrations(dir: string = SQL_DIR): Migration[] {
  return readdirSync(dir)
    .filter((name) => name.endsWith(".sql"))
    .sort()
    .map((name) => {
      const match = /^(\d{4})_[a-z0-9_]+\.sql$/.exec(name);
      if (!match?.[1]) throw new Error(`Cannot load migrations: ${name} is not named NNNN_name.sql`);
      return { version: Number(match[1]), name, sql: readFileSync(join(dir, name), "utf8") };
    });
}
