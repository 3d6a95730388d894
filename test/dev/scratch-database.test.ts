// withDatabase() and createScratchDatabase(): commands that write test data (bench, chaos) and the test
// suite must never reach the database DATABASE_URL names, however that URL names it.
import { expect, test } from "bun:test";
import postgres from "postgres";
import { createScratchDatabase, withDatabase } from "../../src/dev/scratch-database.ts";
import { adminUrl } from "../support/helpers.ts";

test("`withDatabase()` replaces the path and drops ?database= and ?db=, which postgres.js would let override it", () => {
  expect(withDatabase("postgres://u:p@127.0.0.1:5432/prod?database=prod&db=prod&sslmode=disable", "scratch_1")).toBe(
    "postgres://u:p@127.0.0.1:5432/scratch_1?sslmode=disable",
  );
});

test("`createScratchDatabase()` on a URL naming its database by ?database= connects to the scratch database, then drops it", async () => {
  const victim = new URL(adminUrl());
  victim.searchParams.set("database", "postgres");
  const scratch = await createScratchDatabase(victim.toString(), "webhook_inbox_scratch_test");
  const client = postgres(scratch.url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await client<{ db: string }[]>`select current_database() as db`;
    expect(row?.db).toStartWith("webhook_inbox_scratch_test_");
  } finally {
    await client.end({ timeout: 1 });
    await scratch.drop();
  }
  const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
  try {
    expect([...(await admin`select datname from pg_database where datname like 'webhook_inbox_scratch_test%'`)]).toEqual([]);
  } finally {
    await admin.end({ timeout: 1 });
  }
});

test("`createScratchDatabase()` refuses a URL whose password holds an unencoded @ and # before anything connects, quoting none of it", async () => {
  const error = await createScratchDatabase("postgres://user:Kq7@Zx#W9v@127.0.0.1:1/db", "webhook_inbox_scratch_test").catch(
    (err: unknown) => err as Error,
  );
  expect(error).toBeInstanceOf(Error);
  expect((error as Error).message).toStartWith("DATABASE_URL cannot be read unambiguously (value not shown)");
  for (const piece of ["Kq7", "Zx", "W9v"]) expect((error as Error).message).not.toContain(piece);
});
