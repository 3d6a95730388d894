import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
  await expect(migrate(fresh.db, [first])).rejects.toThrow(
    /schema is at migration \d{4}_\w+\.sql, newer than this code.s \(1 migrations\)/,
  );
});

test("migrate() refuses two files of one number and a renamed applied file, and names the file whose SQL fails", async () => {
  const fresh = await freshDatabase({ migrated: false });
  dbs.push(fresh);
  const files = loadMigrations();
  const [first, second] = files;
  if (!first || !second) throw new Error("expected two migrations");
  await expect(migrate(fresh.db, [first, { ...second, version: 1, name: "0001_again.sql" }])).rejects.toThrow(
    /0001_again\.sql and 0001_inbox\.sql have the same number|0001_inbox\.sql and 0001_again\.sql have the same number/,
  );
  await migrate(fresh.db, files);
  const renamed = files.map((m, i) => (i === 1 ? { ...m, name: "0002_renamed.sql" } : m));
  await expect(migrate(fresh.db, renamed)).rejects.toThrow(
    `${second.name} was applied as number 2, and that number is now 0002_renamed.sql`,
  );
  const broken = {
    version: files.length + 1,
    name: `${String(files.length + 1).padStart(4, "0")}_oops.sql`,
    sql: "create tabel nope (id int)",
  };
  await expect(migrate(fresh.db, [...files, broken])).rejects.toThrow(`${broken.name}: syntax error at or near "tabel"`);
  const [row] = await fresh.db<{ n: number }[]>`select count(*)::int as n from schema_migrations`;
  expect(row?.n).toBe(files.length); // nothing of the failed run was applied
});

test("loadMigrations() refuses a file meant as a migration that it would skip (.SQL, .sql.txt, a capital letter) and leaves other files alone", () => {
  const dir = mkdtempSync(join(tmpdir(), "migrations-"));
  try {
    writeFileSync(join(dir, "0001_first.sql"), "select 1;");
    writeFileSync(join(dir, "README.md"), "notes");
    expect(loadMigrations(dir).map((m) => m.name)).toEqual(["0001_first.sql"]);
    for (const bad of ["0002_Upper.sql", "0002_second.SQL", "0002_note.sql.txt"]) {
      writeFileSync(join(dir, bad), "select 2;");
      expect(() => loadMigrations(dir)).toThrow(`${bad} is not named NNNN_name.sql`);
      rmSync(join(dir, bad));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
