import { afterAll, expect, test } from "bun:test";
import { migrate } from "../../src/db/migrate.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { closeAll, connections, freshDatabase } from "../support/helpers.ts";

const dbs: { drop(): Promise<void> }[] = [];
afterAll(async () => {
  for (const d of dbs) await d.drop();
});

test("migrate() applies every file once when four servers start at the same time", async () => {
  const fresh = await freshDatabase({ migrated: false });
  dbs.push(fresh);
  const clients = connections(fresh.url, 4);
  const results = await Promise.all(clients.map((c) => migrate(c, loadMigrations())));
  await closeAll(clients);
  const applied = results.filter((r) => r.length > 0);
  expect(applied).toHaveLength(1);
  expect(applied[0]).toEqual(loadMigrations().map((m) => m.name));
  expect(results.filter((r) => r.length === 0)).toHaveLength(3);
  const rows = await fresh.db`select version, name from schema_migrations order by version`;
  expect(rows.map((r) => r.name)).toEqual(loadMigrations().map((m) => m.name));
  expect(rows.length).toBeGreaterThanOrEqual(3);
});

test("migrate() refuses a gap in the numbering and a changed applied file", async () => {
  const fresh = await freshDatabase({ migrated: false });
  dbs.push(fresh);
  const files = loadMigrations();
  const [first, second] = files;
  if (!first || !second) throw new Error("expected two migrations");
  await expect(migrate(fresh.db, [{ ...second, version: 3 }])).rejects.toThrow(/expected migration 1/);
  await migrate(fresh.db, files);
  await expect(migrate(fresh.db, [{ ...first, sql: `${first.sql}\n-- edited` }, second])).rejects.toThrow(/changed after it was applied/);
  await expect(migrate(fresh.db, [first])).rejects.toThrow(/schema is at migration \d{4}_\w+\.sql, newer than this code.s \(1 migrations\)/);
});
