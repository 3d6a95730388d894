// Start-up check for a transaction pooler nobody told us about. Portable: Web APIs and postgres.js only.
import postgres from "postgres";
import { CannotConnectError } from "./connect-failure.ts";
import { isDatabaseUnavailable, postgresTarget, type DatabaseTls, type Pooler } from "./db.ts";

type Client = postgres.ReservedSql;

/**
 * True when `url` leads through a transaction (or statement) pooler, seen as the server connection
 * behind one client connection changing. Two client connections are pinned (`sql.reserve()`, prepared
 * statements off, a pool of its own); in each of `rounds` rounds the first holds a transaction while
 * the second runs a statement, then the first commits and the second runs another. On a direct
 * connection (or through a session pooler, a proxy, a Docker port mapping) each client keeps its own
 * backend, so `pg_backend_pid()` never changes and the two never share one. Through PgBouncer in
 * transaction mode the committed backend goes back to its idle list, which it hands out last-in
 * first-out, so the second client's next statement lands on the first client's backend.
 * Never a false positive: the answer is false whenever a connection closed during the check (a new
 * backend would have a new pid for an honest reason) or the check did not finish within `timeoutMs`.
 * It can miss a pooler (false) that hands out backends otherwise. PostgreSQL manual, "System Information Functions" (pg_backend_pid); PgBouncer
 * `server_round_robin`.
 * @throws CannotConnectError (the postgres.js error as `cause`) when the first connection could not be
 *   opened: unreachable, wrong password, no such database, unknown host, an unknown URL parameter;
 *   the postgres.js error when the connected database refuses the statements.
 */
export async function detectTransactionPooler(url: string, rounds = 3, timeoutMs = 10_000, tls?: DatabaseTls): Promise<boolean> {
  let closed = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const target = postgresTarget(url, tls);
  const sql = postgres(target.url, {
    ...target.tls,
    max: 2,
    prepare: false,
    connect_timeout: 5,
    // A connection still starting when the pool is ended (a stalled check) stays open until idle.
    idle_timeout: 1,
    onnotice: () => {},
    onclose: () => void (closed = true),
    connection: { application_name: "webhook-inbox pooler check" },
  });
  const check = async (): Promise<boolean> => {
    // Any failure before the first statement answered is the connection's, not the check's.
    const first = await sql.reserve().catch((err: unknown) => Promise.reject(new CannotConnectError(err)));
    const pid = await backendPid(first).catch((err: unknown) => {
      first.release();
      return Promise.reject(new CannotConnectError(err));
    });
    const second = await sql.reserve();
    try {
      return await backendsMove(first, second, rounds, pid);
    } finally {
      first.release();
      second.release();
    }
  };
  // A check that stalls (a backend gone between two statements, a pooler out of server connections)
  // proves nothing; ending the pool below fails whatever it still waits for.
  const stalled = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
  const checking = check();
  checking.catch(() => {}); // after a stall, the rejection that ending the pool causes has no reader
  try {
    const moved = await Promise.race([checking, stalled]);
    return moved && !closed;
  } finally {
    clearTimeout(timer);
    await sql.end({ timeout: 1 });
  }
}

/** Runs the rounds; true as soon as one client's backend changed or both clients shared one. */
async function backendsMove(first: Client, second: Client, rounds: number, firstPid: number): Promise<boolean> {
  const own = { first: firstPid, second: await backendPid(second) };
  if (own.first === own.second) return true;
  for (let round = 0; round < rounds; round++) {
    const [holder, other] = round % 2 === 0 ? [first, second] : [second, first];
    await holder.unsafe("begin");
    const held = await backendPid(holder);
    // Not awaited before the commit: behind a pooler with one server connection it waits for this one.
    const during = backendPid(other);
    await Promise.race([during, pause(100)]);
    await holder.unsafe("commit");
    const after = await backendPid(other);
    const pids = [held, await during, after];
    const expected = holder === first ? [own.first, own.second, own.second] : [own.second, own.first, own.first];
    if (pids.some((pid, i) => pid !== expected[i])) return true;
  }
  return false;
}

async function backendPid(client: Client): Promise<number> {
  const [row] = await client<{ pid: number }[]>`select pg_backend_pid() as pid`;
  if (row === undefined) throw new Error("select pg_backend_pid() returned no row");
  return row.pid;
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The start-up refusal for a hidden transaction pooler: one line naming `DATABASE_POOLER` when
 * `pooler` is `none` and {@link detectTransactionPooler} sees one, otherwise undefined (also when the
 * database cannot be reached: the command's own connection reports that, and where the pooler goes
 * unseen, `sql.begin`'s commit check keeps an unsaved event from being acknowledged). `tls`: the
 * URL's TLS settings with its `sslrootcert` read (runtime/database-tls.ts).
 * @throws CannotConnectError when the connection failed for another reason (wrong password, no such
 *   database, unknown host, an unknown URL parameter); any other error of the check (e.g. a
 *   statement pooler refusing `begin`).
 */
export async function hiddenPoolerProblem(url: string, pooler: Pooler, tls?: DatabaseTls): Promise<string | undefined> {
  if (pooler === "transaction") return undefined;
  let found: boolean;
  try {
    found = await detectTransactionPooler(url, 3, 10_000, tls);
  } catch (err) {
    if (isDatabaseUnavailable(err instanceof CannotConnectError ? err.cause : err)) return undefined;
    throw err;
  }
  if (!found) return undefined;
  return "DATABASE_URL leads to a transaction pooler (the PostgreSQL backend behind one connection changed between transactions): set DATABASE_POOLER=transaction, or point DATABASE_URL at PostgreSQL itself or at a session pooler";
}
