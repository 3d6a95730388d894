import { afterAll, beforeAll, expect, test } from "bun:test";
import { boundTransaction, COMMIT_ROLLED_BACK, connect, isDatabaseUnavailable, sqlState, SQLSTATE, type Db } from "../../src/db/db.ts";
import { isPermanent } from "../../src/db/db.ts";
import postgres from "postgres";
import { freshDatabase } from "../support/helpers.ts";

// Regression tests for patches/postgres@3.4.9.patch (patches/README.md names the test of each fix):
// without it, a backend terminated in the middle of a transaction makes postgres.js throw from a timer
// (socket.write on a closed socket), which ends the process, fail the reopened connection's first
// query with the old backend's FATAL, or run the transaction's later statements on the reopened
// connection.
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

/** A transaction waiting between two statements (right after BEGIN it is briefly idle in transaction too). */
const IDLE_IN_TRANSACTION = "state = 'idle in transaction' and query not like 'begin%'";

async function waitForIdleTransaction(): Promise<void> {
  const where = `pid <> pg_backend_pid() and datname = current_database() and ${IDLE_IN_TRANSACTION}`;
  await waitFor(async () => (await admin.unsafe(`select 1 from pg_stat_activity where ${where}`)).length > 0);
}

/** What `promise` rejects with, or null when it resolves. */
function failureOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => null,
    (e: unknown) => e ?? new Error("rejected with nothing"),
  );
}

test("a pool survives backends terminated mid-statement and idle in transaction, three times over", async () => {
  const db = connect(fresh.url, { max: 2 });
  for (let round = 0; round < 3; round++) {
    // Each begin's rejection is taken as a value from the start: the connection can close (and reject
    // the begin) before terminate() has its answer, and a rejection without a handler fails the run.
    const busy = failureOf(
      db.begin(async (tx) => {
        await tx`select 1`;
        await tx`select pg_sleep(5)`;
      }),
    );
    await waitFor(
      async () =>
        (
          await admin`select 1 from pg_stat_activity where datname = current_database() and query like '%pg_sleep(5)%' and pid <> pg_backend_pid()`
        ).length > 0,
    );
    expect(await terminate("query like '%pg_sleep(5)%'")).toBe(1);
    expect(isDatabaseUnavailable(await busy)).toBe(true);

    let release!: () => void;
    const paused = new Promise<void>((r) => (release = r));
    const idle = failureOf(
      db.begin(async (tx) => {
        await tx`select 1`;
        await paused;
        await tx`select 2`;
      }),
    );
    await waitForIdleTransaction();
    expect(await terminate(IDLE_IN_TRANSACTION)).toBe(1);
    release();
    expect(await idle).not.toBeNull();

    const [row] = await db`select ${round}::int as round`;
    expect(row?.round).toBe(round);
  }
  await db.end({ timeout: 1 });
}, 30_000);

test("`sql.begin()` rejects what its callback sends after the backend died between two statements; none of it runs on the reopened connection", async () => {
  // postgres.js 3.4.9 handed such a statement to the connection object it had used, which the pool opens
  // again for other work: one sent before that resolved with the new session's empty startup answer,
  // one sent after ran inside whatever transaction the connection then served, and was committed by it.
  const db = connect(fresh.url, { max: 1 });
  try {
    await db`create table after_close_probe (id int)`;
    let resume!: () => void;
    const resumed = new Promise<void>((r) => (resume = r));
    let otherStarted!: () => void;
    const otherRunning = new Promise<void>((r) => (otherStarted = r));
    let callbackDone!: () => void;
    const callbackFinished = new Promise<void>((r) => (callbackDone = r));
    const later: unknown[] = [];
    const dead = failureOf(
      db.begin(async (tx) => {
        await tx`insert into after_close_probe (id) values (${1})`;
        await resumed;
        later.push(await failureOf(tx`insert into after_close_probe (id) values (${2})`));
        await otherRunning;
        later.push(await failureOf(tx`insert into after_close_probe (id) values (${3})`));
        callbackDone();
      }),
    );
    await waitForIdleTransaction();
    expect(await terminate(IDLE_IN_TRANSACTION)).toBe(1);
    expect(isDatabaseUnavailable(await dead)).toBe(true);
    resume();
    await db.begin(async (tx) => {
      await tx`insert into after_close_probe (id) values (${4})`;
      otherStarted();
      await Promise.race([callbackFinished, Bun.sleep(5_000)]);
    });
    expect(later.map((err) => (err as { code?: unknown } | null)?.code)).toEqual(["CONNECTION_CLOSED", "CONNECTION_CLOSED"]);
    expect((await db<{ id: number }[]>`select id from after_close_probe order by id`).map((r) => r.id)).toEqual([4]);
  } finally {
    await db.end({ timeout: 1 });
  }
}, 20_000);

test("`sql.begin()` rejects the statements its callback queued behind a busy connection when the backend dies", async () => {
  // postgres.js 3.4.9 rejected the transaction and the statements already sent, but never settled the
  // ones waiting in the transaction's own queue: the callback waited for them forever (upstream #1186).
  const db = connect(fresh.url, { max: 1 });
  try {
    let answered = -1;
    const dead = failureOf(
      db.begin(async (tx) => {
        // Each statement's first use is described before it runs, which fills the connection: the
        // statements after the first wait in the transaction's queue.
        const statements = [0, 1, 2, 3].map((i) => failureOf(tx`select pg_sleep(${i === 0 ? 5 : 0}), ${i}::int as i`));
        answered = (await Promise.all(statements)).length;
      }),
    );
    await waitFor(
      async () =>
        (await admin`select 1 from pg_stat_activity where datname = current_database() and query like 'select pg_sleep($1)%'`).length > 0,
    );
    expect(await terminate("query like 'select pg_sleep($1)%'")).toBe(1);
    expect(isDatabaseUnavailable(await dead)).toBe(true);
    await waitFor(async () => answered === 4, 2_000);
    expect((await db<{ ok: number }[]>`select 1 as ok`)[0]?.ok).toBe(1);
  } finally {
    await db.end({ timeout: 1 });
  }
});

test("`sql.reserve()` rejects a statement sent after its backend was terminated, and the process lives on", async () => {
  // postgres.js 3.4.9 threw a TypeError from a timer (socket.write on the closed connection's null
  // socket): an uncaught exception, which ends the process (upstream #1208).
  let closed!: () => void;
  const socketClosed = new Promise<void>((r) => (closed = r));
  const db = postgres(fresh.url, { max: 1, onnotice: () => {}, onclose: () => closed() });
  try {
    const reserved = await db.reserve();
    const pid = (await reserved<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]?.pid;
    expect(await terminate(`pid = ${Number(pid)}`)).toBe(1);
    await socketClosed;
    const late = await Promise.race([failureOf(reserved`select 1`), Bun.sleep(2_000).then(() => "no answer in 2 s")]);
    expect((late as { code?: unknown } | null)?.code).toBe("CONNECTION_CLOSED");
  } finally {
    await db.end({ timeout: 1 });
  }
});

test("isDatabaseUnavailable() is true for a refused connection and false for a constraint violation", async () => {
  const nowhere = connect("postgres://postgres:postgres@127.0.0.1:1/none", { connectTimeoutSec: 1 });
  const refused = await nowhere`select 1`.then(
    () => null,
    (e: unknown) => e,
  );
  await nowhere.end({ timeout: 1 });
  expect(isDatabaseUnavailable(refused)).toBe(true);
  const violation = await fresh.db`insert into invoices (id, customer_id, status, currency) values ('in_x', 'cus_x', 'bogus', 'usd')`.then(
    () => null,
    (e: unknown) => e,
  );
  expect(isDatabaseUnavailable(violation)).toBe(false);
});

test("isDatabaseUnavailable() is true for a write a read-only server refuses (25006: a standby, or a new primary still promoting)", async () => {
  const refused = await fresh.db
    .begin(async (tx) => {
      await tx`set transaction read only`;
      await tx`insert into invoices (id, customer_id, status, currency) values ('in_ro', 'cus_ro', 'open', 'usd')`;
    })
    .then(
      () => null,
      (e: unknown) => e,
    );
  expect(sqlState(refused)).toBe(SQLSTATE.readOnlyTransaction);
  expect(isDatabaseUnavailable(refused)).toBe(true);
});

// A transaction pooler gives each transaction whichever server connection is free, so a statement
// postgres.js prepared on one is missing on the next. `deallocate all` inside the transaction makes
// the same state on a direct connection: every statement this connection cached is gone.
test("`sql.begin()` never resolves for a transaction whose COMMIT did not commit", async () => {
  const db = connect(fresh.url, { max: 1, prepare: true });
  try {
    await db`create table commit_probe (id int primary key)`;
    // Caches this connection's `commit`, `rollback` and insert as prepared statements (when prepared).
    await db.begin(async (tx) => {
      await tx`insert into commit_probe (id) values (${0})`;
    });
    await db
      .begin(async (tx) => {
        await tx`select 1`;
      })
      .catch(() => {});
    for (let id = 1; id <= 3; id++) {
      const result = await db
        .begin(async (tx) => {
          await tx.unsafe(`insert into commit_probe (id) values (${id})`);
          await tx.unsafe("deallocate all");
        })
        .then(
          () => "resolved",
          (e: unknown) => e,
        );
      const saved = (await db`select 1 from commit_probe where id = ${id}`).length === 1;
      // Either it committed and says so, or it failed and saved nothing; never success without the row.
      expect({ id, result: result === "resolved" ? "resolved" : "rejected", saved }).toEqual({
        id,
        result: saved ? "resolved" : "rejected",
        saved,
      });
    }
  } finally {
    await db.end({ timeout: 1 });
  }
});

test("`sql.begin()` rejects with the original error when a statement's prepared form is gone in a transaction, and the connection stays usable", async () => {
  const db = connect(fresh.url, { max: 1, prepare: true });
  try {
    await db`create table if not exists commit_probe (id int primary key)`;
    await db`insert into commit_probe (id) values (${100}) on conflict do nothing`;
    const error = await db
      .begin(async (tx) => {
        await tx.unsafe("deallocate all");
        await tx`insert into commit_probe (id) values (${101}) on conflict do nothing`;
      })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(sqlState(error)).toBe(SQLSTATE.invalidSqlStatementName);
    expect(isPermanent(error)).toBe(false);
    expect((await db`select 1 from commit_probe where id = 101`).length).toBe(0);
    // The stale statement was forgotten: the same insert works in the next transaction.
    await db.begin(async (tx) => {
      await tx`insert into commit_probe (id) values (${101}) on conflict do nothing`;
    });
    expect((await db`select 1 from commit_probe where id = 101`).length).toBe(1);
  } finally {
    await db.end({ timeout: 1 });
  }
});

test("`sql.begin()` throws COMMIT_ROLLED_BACK when PostgreSQL answers its COMMIT with ROLLBACK, and nothing is saved", async () => {
  const db = connect(fresh.url, { max: 1 });
  try {
    await db`create table if not exists commit_probe (id int primary key)`;
    // A savepoint's failed cleanup aborts the transaction; the caller catches the savepoint's error,
    // so postgres.js sees no failed statement of the transaction itself and sends COMMIT.
    const error = await db
      .begin(async (tx) => {
        await tx`insert into commit_probe (id) values (${200})`;
        await tx
          .savepoint(async (sp) => {
            await sp.unsafe("release savepoint s0");
            throw new Error("handler failed");
          })
          .catch(() => {});
      })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect((error as { code?: unknown } | null)?.code).toBe(COMMIT_ROLLED_BACK);
    expect(isPermanent(error)).toBe(false);
    expect((await db`select 1 from commit_probe where id = 200`).length).toBe(0);
    expect((await db`select 1 as ok`)[0]?.ok).toBe(1);
  } finally {
    await db.end({ timeout: 1 });
  }
});

test("`boundTransaction()` stops a statement that runs past the bound (57014, rolled back, nothing kept), and the next transaction on the connection is unbounded", async () => {
  const db = connect(fresh.url, { max: 1 });
  try {
    await db`create table if not exists bound_probe (n int)`;
    const started = Date.now();
    const stopped = await db
      .begin(async (tx) => {
        await boundTransaction(tx, 200);
        await tx`insert into bound_probe values (1)`;
        await tx`select pg_sleep(5)`;
      })
      .catch((err: unknown) => err);
    expect(sqlState(stopped)).toBe(SQLSTATE.queryCanceled);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(await db`select count(*)::int as n from bound_probe`).toEqual([{ n: 0 }] as never);
    // SET LOCAL: the setting ended with its transaction, on the same (only) connection.
    const [after] = await db<{ timeout: string; idle: string }[]>`
      select current_setting('statement_timeout') as timeout, current_setting('idle_in_transaction_session_timeout') as idle`;
    expect(after).toEqual({ timeout: "0", idle: "0" });
  } finally {
    await db.end({ timeout: 5 });
  }
});

test("`boundTransaction()` ends the session of a client that stalls inside the transaction past the bound (at least 1 s), releasing its locks", async () => {
  const db = connect(fresh.url, { max: 1 });
  try {
    await db`create table if not exists bound_locked (id int primary key)`;
    await db`insert into bound_locked values (1) on conflict do nothing`;
    const stalled = await db
      .begin(async (tx) => {
        await boundTransaction(tx, 200);
        await tx`select 1 from bound_locked where id = 1 for update`;
        await Bun.sleep(2_500); // the client stalls (a paused process) with the row locked
        await tx`select 1`;
      })
      .catch((err: unknown) => err);
    expect(isDatabaseUnavailable(stalled) || sqlState(stalled) === "25P03").toBe(true);
    // The lock is gone: another transaction takes it at once.
    const [row] = await admin`select id from bound_locked where id = 1 for update nowait`.catch(() => [undefined]);
    expect(row).toEqual({ id: 1 });
  } finally {
    await db.end({ timeout: 5 });
  }
});
