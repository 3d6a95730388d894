import { afterAll, beforeAll, expect, test } from "bun:test";
import { connect, isDatabaseUnavailable, type Db } from "../src/db.ts";
import { freshDatabase } from "./helpers.ts";

// Regression test for patches/postgres@3.4.9.patch: without it, a backend terminated in the middle of
// a transaction makes postgres.js throw from a timer (socket.write on a closed socket) or replay the
// stale FATAL on the reconnected socket, and the whole process (a receiver, or this test run) dies.
let fresh: Awaited<ReturnType<typeof freshDatabase>>;
let admin: Db;
beforeAll(async () => {
  fresh = await freshDatabase();
  admin = connect(fresh.url, { max: 1 });
});
afterAll(async () => {
  await admin.end({ timeout: 5 });
  await fresh.drop();
});

async function terminate(where: string): Promise<number> {
  const rows = await admin.unsafe<{ n: number }[]>(
    `select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where pid <> pg_backend_pid() and datname = current_database() and ${where}`,
  );
  return rows[0]?.n ?? 0;
}

async function waitFor(check: () => Promise<boolean>, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await Bun.sleep(20);
  }
}

test("a pool survives backends terminated mid-statement and idle in transaction, three times over", async () => {
  const db = connect(fresh.url, { max: 2 });
  for (let round = 0; round < 3; round++) {
    const busy = db.begin(async (tx) => {
      await tx`select 1`;
      await tx`select pg_sleep(5)`;
    });
    await waitFor(async () => (await admin`select 1 from pg_stat_activity where query like '%pg_sleep(5)%' and pid <> pg_backend_pid()`).length > 0);
    expect(await terminate("query like '%pg_sleep(5)%'")).toBe(1);
    const busyError = await busy.then(() => null, (e: unknown) => e);
    expect(isDatabaseUnavailable(busyError)).toBe(true);

    let release!: () => void;
    const paused = new Promise<void>((r) => (release = r));
    const idle = db.begin(async (tx) => {
      await tx`select 1`;
      await paused;
      await tx`select 2`;
    });
    await waitFor(async () => (await admin`select 1 from pg_stat_activity where state = 'idle in transaction' and datname = current_database()`).length > 0);
    expect(await terminate("state = 'idle in transaction'")).toBe(1);
    release();
    await expect(idle).rejects.toBeDefined();

    const [row] = await db`select ${round}::int as round`;
    expect(row?.round).toBe(round);
  }
  await db.end({ timeout: 1 });
}, 30_000);

test("isDatabaseUnavailable() is true for a refused connection and false for a constraint violation", async () => {
  const nowhere = connect("postgres://postgres:postgres@127.0.0.1:1/none", { connectTimeoutSec: 1 });
  const refused = await nowhere`select 1`.then(() => null, (e: unknown) => e);
  await nowhere.end({ timeout: 1 });
  expect(isDatabaseUnavailable(refused)).toBe(true);
  const violation = await fresh.db`insert into invoices (id, customer_id, status, currency) values ('in_x', 'cus_x', 'bogus', 'usd')`.then(() => null, (e: unknown) => e);
  expect(isDatabaseUnavailable(violation)).toBe(false);
});
