// An app's configuration (src/app-config.ts, runtime/app-config-file.ts) and the schema checks at
// start (db/migrate.ts schemaAtStart): handler tables added or replaced, settings under the
// environment, secrets refused, app migrations applied after the package's and tracked apart.
import { afterAll, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { appHandlerTables, AppConfigError, defineConfig } from "../../src/app-config.ts";
import { handlerTable, HandlerTableError } from "../../src/handlers/handler-table.ts";
import { handlersFor, shippedHandlerTables, useHandlerTables } from "../../src/receiver/endpoints.ts";
import { applyAppConfig, loadAppConfig } from "../../src/runtime/app-config-file.ts";
import { loadAppMigrations, loadMigrations, useAppMigrations } from "../../src/runtime/migrations-fs.ts";
import { migrate, schemaAtStart } from "../../src/db/migrate.ts";
import { freshDatabase } from "../support/helpers.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const dir = join(ROOT, "test", `.scaffold-config-${process.pid}`);
const dbs: { drop(): Promise<void> }[] = [];
afterAll(async () => {
  useHandlerTables(shippedHandlerTables);
  useAppMigrations(undefined);
  rmSync(dir, { recursive: true, force: true });
  await Promise.all(dbs.map((d) => d.drop()));
});

const customers = handlerTable({ "customer.created": async (tx) => void (await tx`select 1`) });

test("`defineConfig()` refuses an unknown field, a secret or badly named setting, an absolute migrations path and a handler that is not one", () => {
  expect(() => defineConfig({ handler: {} } as never)).toThrow('unknown field "handler"');
  expect(() => defineConfig({ settings: { STRIPE_WEBHOOK_SECRET: "whsec_x" } })).toThrow("settings.STRIPE_WEBHOOK_SECRET is a secret");
  expect(() => defineConfig({ settings: { DATABASE_URL: "postgres://u:p@h/d" } })).toThrow(AppConfigError);
  expect(() => defineConfig({ settings: { ADMIN_TOKEN: "t" } })).toThrow("is a secret");
  expect(() => defineConfig({ settings: { "inbox-mode": "async" } })).toThrow("not an environment variable name");
  expect(() => defineConfig({ migrations: "/abs/path" })).toThrow("relative to the configuration file");
  expect(() => defineConfig({ handlers: { stripe: { "customer.created": "nope" } as never } })).toThrow(HandlerTableError);
  expect(defineConfig({ settings: { INBOX_MODE: "async" } }).settings).toEqual({ INBOX_MODE: "async" });
});

test("`appHandlerTables()` adds the app's table to the shipped one, refuses an event type both define, and with replaceHandlers runs only the app's", () => {
  const added = appHandlerTables(shippedHandlerTables, { handlers: { stripe: customers } });
  expect(Object.keys(added.stripe ?? {})).toContain("customer.created");
  expect(added.stripe?.["invoice.paid"]).toBe(shippedHandlerTables.stripe["invoice.paid"]);
  expect(added.github).toBe(shippedHandlerTables.github);
  const clash = handlerTable({ "invoice.paid": async () => {} });
  expect(() => appHandlerTables(shippedHandlerTables, { handlers: { stripe: clash } })).toThrow(
    /"invoice.paid" has two handlers.*handlers\.stripe and the shipped table; set replaceHandlers: true/,
  );
  const replaced = appHandlerTables(shippedHandlerTables, { handlers: { stripe: clash }, replaceHandlers: true });
  expect(Object.keys(replaced)).toEqual(["stripe"]);
  expect(Object.keys(replaced.stripe ?? {})).toEqual(["invoice.paid"]);
});

test("a configuration file's handlers reach every reader of the tables, its migrations folder is found beside it, and its settings yield to the environment", async () => {
  mkdirSync(join(dir, "migrations"), { recursive: true });
  writeFileSync(join(dir, "migrations", "0001_customers.sql"), "create table customers (id text primary key);\n");
  writeFileSync(
    join(dir, "webhook-inbox.config.ts"),
    `import { defineConfig, handlerTable } from "webhook-inbox";
export default defineConfig({
  handlers: { stripe: handlerTable({ "customer.created": async (tx, c) => void (await tx\`insert into customers values (\${String(c.id)}) on conflict do nothing\`) }) },
  settings: { INBOX_MODE: "async", PORT: "4000" },
});
`,
  );
  const env: Record<string, string | undefined> = { PORT: "5000" };
  applyAppConfig(await loadAppConfig(undefined, dir), env);
  expect(typeof handlersFor("stripe")?.["customer.created"]).toBe("function");
  expect(typeof handlersFor("stripe")?.["invoice.paid"]).toBe("function");
  expect(loadAppMigrations().map((m) => m.name)).toEqual(["0001_customers.sql"]);
  expect(env).toEqual({ PORT: "5000", INBOX_MODE: "async" });
  await expect(loadAppConfig("missing.config.ts", dir)).rejects.toThrow("no configuration file at");
  useHandlerTables(shippedHandlerTables);
  useAppMigrations(undefined);
});

test("`webhook-inbox migrate --config` applies the package's migrations and then the app's, recorded apart; a second run applies nothing", async () => {
  const fresh = await freshDatabase({ migrated: false });
  dbs.push(fresh);
  const cli = (...args: string[]) =>
    spawnSync(process.execPath, [join(ROOT, "src/bin/webhook-inbox.ts"), ...args], {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, DATABASE_URL: fresh.url },
    });
  const first = cli("migrate", "--config", join(dir, "webhook-inbox.config.ts"));
  expect(first.stderr).toBe("");
  expect(first.stdout).toContain(`${loadMigrations().at(-1)!.name}, app/0001_customers.sql`);
  expect(cli("--config", join(dir, "webhook-inbox.config.ts"), "migrate").stdout.trim()).toBe("Nothing to apply: the schema is current");
  expect(await fresh.db`select version, name from app_schema_migrations`).toEqual([{ version: 1, name: "0001_customers.sql" }] as never);
  const [pkg] = await fresh.db<{ n: number }[]>`select count(*)::int as n from schema_migrations`;
  expect(pkg?.n).toBe(loadMigrations().length);
  const bad = cli("migrate", "--config", join(dir, "nope.ts"));
  expect({ status: bad.status, stderr: bad.stderr.trim() }).toEqual({
    status: 1,
    stderr: `webhook-inbox: no configuration file at ${join(dir, "nope.ts")} (--config)`,
  });
});

test("with MIGRATE_ON_START=false a start refuses a database behind the code (run migrate) and one ahead of it (both versions named), and passes a current one", async () => {
  const all = loadMigrations();
  const fresh = await freshDatabase({ migrated: false });
  dbs.push(fresh);
  await migrate(fresh.db, all.slice(0, 20));
  await expect(schemaAtStart(fresh.db, all, [], false)).rejects.toThrow(
    `the database's schema is at migration 0020_ledger_basis_money_back.sql (20), older than this code's (${all.length} migrations), and MIGRATE_ON_START=false: run \`webhook-inbox migrate\``,
  );
  expect(await schemaAtStart(fresh.db, all, [], true)).toEqual(all.slice(20).map((m) => m.name));
  expect(await schemaAtStart(fresh.db, all, [], false)).toEqual([]);
  await expect(schemaAtStart(fresh.db, all.slice(0, 27), [], false)).rejects.toThrow(
    `the database's schema is at migration ${all.at(-1)!.name}, newer than this code's (27 migrations)`,
  );
  await expect(schemaAtStart(fresh.db, all.slice(0, 27), [], true)).rejects.toThrow(/newer than this code's \(27 migrations\)/);
  const app = [{ version: 1, name: "0001_customers.sql", sql: "create table customers (id text primary key)" }];
  await expect(schemaAtStart(fresh.db, all, app, false)).rejects.toThrow("the database has 0 of the app's migrations and the app has 1");
});
