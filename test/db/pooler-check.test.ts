// Direct connections only; through PgBouncer: test/runtimes/pgbouncer.test.ts.
import { afterAll, expect, test } from "bun:test";
import { CannotConnectError } from "../../src/db/connect-failure.ts";
import { detectTransactionPooler, hiddenPoolerProblem } from "../../src/db/pooler-check.ts";
import { freshDatabase } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase({ migrated: false });
afterAll(() => fresh.drop());

test("`detectTransactionPooler()` sees no pooler on a direct connection, every time", async () => {
  for (let check = 0; check < 5; check++) expect(await detectTransactionPooler(fresh.url)).toBe(false);
});

test("`detectTransactionPooler()` answers false when the check cannot finish in time, and leaves nothing pending", async () => {
  expect(await detectTransactionPooler(fresh.url, 3, 1)).toBe(false);
  // Its connections close, one still starting when the check gave up included (idle timeout, 1 s).
  await waitUntil(
    "the check's connections to end",
    async () => {
      const [row] = await fresh.db<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name = 'webhook-inbox pooler check'
    `;
      return row?.n === 0;
    },
    { timeoutMs: 10_000, intervalMs: 20 },
  );
}, 15_000);

test("`hiddenPoolerProblem()` finds no problem on a direct connection, an unreachable database, or with DATABASE_POOLER=transaction", async () => {
  expect(await hiddenPoolerProblem(fresh.url, "none")).toBeUndefined();
  expect(await hiddenPoolerProblem("postgres://postgres:postgres@127.0.0.1:1/none", "none")).toBeUndefined();
  expect(await hiddenPoolerProblem("postgres://postgres:postgres@127.0.0.1:1/none", "transaction")).toBeUndefined();
});

test("`hiddenPoolerProblem()` throws CannotConnectError, saying it cannot connect, for a wrong password, a missing database or an unknown host", async () => {
  const admin = new URL(fresh.url);
  const wrongPassword = new URL(admin.href);
  wrongPassword.password = "wrong-password";
  const missing = new URL(admin.href);
  missing.pathname = "/no_such_database";
  const unknownHost = new URL(admin.href);
  unknownHost.hostname = "no-such-host.invalid";
  for (const url of [wrongPassword, missing, unknownHost]) {
    const error = await hiddenPoolerProblem(url.href, "none").catch((err: unknown) => err);
    expect(error).toBeInstanceOf(CannotConnectError);
    expect((error as Error).message).toStartWith("Cannot connect to the database: ");
    expect((error as Error).message).not.toContain("wrong-password");
  }
}, 30_000);
