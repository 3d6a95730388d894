import postgres from "postgres";
import { within } from "./sleep.ts";
import { PermanentError } from "../errors.ts";
import { sslModeProblem } from "./database-url.ts";
import { assertPatchedPostgres } from "./patched-postgres.ts";

/** The connection pool (postgres.js `Sql`). Use it only outside transactions. */
export type Db = postgres.Sql;

/**
 * A transaction handle from `sql.begin`. A function that takes a `Tx` must be called inside the
 * inbox transaction and must send every statement through it (never through the outer pool).
 */
export type Tx = postgres.TransactionSql;

/** SQLSTATE codes this project branches on (PostgreSQL manual, Appendix A "Error Codes"). */
export const SQLSTATE = {
  uniqueViolation: "23505",
  queryCanceled: "57014",
  adminShutdown: "57P01",
  crashShutdown: "57P02",
  cannotConnectNow: "57P03",
  serializationFailure: "40001",
  deadlockDetected: "40P01",
  lockNotAvailable: "55P03",
  tooManyConnections: "53300",
  untranslatableCharacter: "22P05",
  undefinedTable: "42P01",
  /** "cannot execute … in a read-only transaction": the server is a standby (or about to stop being one). */
  readOnlyTransaction: "25006",
  /** "prepared statement … does not exist": a statement cached on another server connection (transaction pooler). */
  invalidSqlStatementName: "26000",
} as const;

/**
 * `code` of the error `sql.begin` throws (patches/postgres@3.4.9.patch) when PostgreSQL answered its
 * COMMIT with the command tag ROLLBACK: the transaction had failed without postgres.js seeing the
 * error (a caught statement error, or, with prepared statements behind a transaction pooler, a COMMIT
 * that postgres.js retried after 26000), and nothing of it was saved. Transient: the caller answers
 * 5xx, or a worker retries.
 */
export const COMMIT_ROLLED_BACK = "COMMIT_ROLLED_BACK";

/** What sits between us and PostgreSQL: nothing (or a session pooler), or a transaction pooler. */
export type Pooler = "none" | "transaction";

/** Options for {@link connect}. */
export interface ConnectOptions {
  /** Pool size (connections). Default 10. */
  max?: number;
  /** Seconds to wait for a new connection before failing. Default 5. */
  connectTimeoutSec?: number;
  /** Named prepared statements (postgres.js default). Forced off by `pooler: "transaction"`. */
  prepare?: boolean;
  /**
   * `transaction`: the URL points at a transaction pooler (PgBouncer `pool_mode = transaction`), which
   * gives each transaction whichever server connection is free. A statement prepared on one server
   * connection is then missing on the next ("prepared statement … does not exist", 26000) or clashes
   * with another client's ("… already exists", 42P05), so prepared statements are off. Default `none`.
   */
  pooler?: Pooler;
  /** Application name shown in pg_stat_activity. */
  applicationName?: string;
  /**
   * TLS to PostgreSQL; default: what the URL's `sslmode` says ({@link databaseTlsOf}). Required when the
   * URL names an `sslrootcert` file: the runtime reads it (runtime/database-tls.ts) and passes its PEM.
   */
  tls?: DatabaseTls;
}

/** libpq's `sslmode` values (PostgreSQL manual, 32.19 "SSL Support", Table 32.1). */
export type SslMode = "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full";

/** TLS to PostgreSQL, as DATABASE_URL's libpq-style `sslmode` and `sslrootcert` ask for it. */
export interface DatabaseTls {
  mode: SslMode;
  /**
   * PEM text of the CA certificate(s) the server's certificate must chain to: the file `sslrootcert`
   * names (a managed database's CA bundle). Undefined: the runtime's own trust store.
   */
  ca?: string;
}

/**
 * The URL without its `sslmode` and `sslrootcert` parameters (postgres.js would send an unknown
 * parameter such as `sslrootcert` to the server as a setting, which refuses it), the mode they ask
 * for (libpq's rules: a root certificate file makes `require` verify the chain, `sslrootcert=system`
 * means `verify-full` against the trust store), and the root certificate file's path, if any.
 * @throws Error naming the parameter for an `sslmode` libpq does not know.
 */
export function databaseTlsOf(url: string): { url: string; mode?: SslMode; rootCertFile?: string } {
  const query = url.indexOf("?");
  if (query === -1) return { url };
  const params = new URLSearchParams(url.slice(query + 1));
  const mode = params.get("sslmode") ?? undefined;
  const root = params.get("sslrootcert") ?? undefined;
  const problem = sslModeProblem(mode);
  if (problem) throw new Error(problem);
  params.delete("sslmode");
  params.delete("sslrootcert");
  const rest = params.toString();
  const bare = url.slice(0, query) + (rest ? `?${rest}` : "");
  if (root === "system") return { url: bare, mode: "verify-full" };
  const effective = root !== undefined && (mode === undefined || mode === "require") ? "verify-ca" : (mode as SslMode | undefined);
  return { url: bare, mode: effective, rootCertFile: root };
}

/**
 * What postgres.js is given for `url`: the URL without `sslmode`/`sslrootcert` and its `ssl` option
 * (`tls`, else the URL's `sslmode`). Shared by {@link connect} and the pooler check's own pool.
 * @throws Error for an unknown `sslmode`, or when the URL names an `sslrootcert` file and `tls` is
 *   undefined (the file is read at the edge: runtime/database-tls.ts).
 */
export function postgresTarget(url: string, tls: DatabaseTls | undefined): { url: string; tls: { ssl?: postgres.Options<{}>["ssl"] } } {
  const fromUrl = databaseTlsOf(url);
  if (fromUrl.rootCertFile !== undefined && tls === undefined)
    throw new Error("DATABASE_URL names an sslrootcert file, which this caller did not read: pass its PEM as options.tls.ca");
  const settings = tls ?? (fromUrl.mode ? { mode: fromUrl.mode } : undefined);
  const host = /@([^/?:,]+)/.exec(fromUrl.url)?.[1] ?? /^postgres(?:ql)?:\/\/([^/?:,@]+)/.exec(fromUrl.url)?.[1];
  return { url: fromUrl.url, tls: settings ? { ssl: sslOption(settings, host) } : {} };
}

/** postgres.js's `ssl` option for `tls` connecting to `host` (the URL's first host, for the name check of an IP address). */
function sslOption(tls: DatabaseTls, host: string | undefined): postgres.Options<{}>["ssl"] {
  switch (tls.mode) {
    case "disable":
      return false;
    case "allow":
    case "prefer":
      return "prefer";
    case "require":
      return "require";
    case "verify-ca":
      // The chain is checked against the CA; the host name is not (libpq's verify-ca).
      return { rejectUnauthorized: true, ...(tls.ca ? { ca: tls.ca } : {}), checkServerIdentity: () => undefined };
    case "verify-full":
      return { rejectUnauthorized: true, ...(tls.ca ? { ca: tls.ca } : {}), ...(host ? { host } : {}) };
  }
}

/**
 * Opens a postgres.js pool. Connections are lazy: nothing is contacted until the first query.
 * Reconnect backoff is bounded (≤ 1 s) so a short database restart is a short outage, not ~20 s
 * of 5xx (postgres.js's default backoff grows with attempts). TLS follows the URL's `sslmode` and
 * `sslrootcert` as libpq does ({@link databaseTlsOf}, `options.tls`).
 * @throws Error when the postgres.js loaded is not the patched one ({@link assertPatchedPostgres}), for an
 *   unknown `sslmode`, or when the URL names an `sslrootcert` file and `options.tls` was not given.
 */
export function connect(url: string, options: ConnectOptions = {}): Db {
  assertPatchedPostgres();
  const target = postgresTarget(url, options.tls);
  const cancelled = { waits: 0 };
  const db = postgres(target.url, {
    ...target.tls,
    max: options.max ?? 10,
    connect_timeout: options.connectTimeoutSec ?? 5,
    idle_timeout: 60,
    max_lifetime: 60 * 30,
    prepare: options.pooler === "transaction" ? false : (options.prepare ?? true),
    backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 1),
    onnotice: (notice) => void (isSyncRepCancel(notice) && cancelled.waits++),
    connection: { application_name: options.applicationName ?? "webhook-inbox" },
  });
  syncRepCancels.set(db, cancelled);
  return db;
}

/**
 * Per pool made by {@link connect}: how many times PostgreSQL warned one of its connections that a commit
 * stopped waiting for the synchronous standby. The warning arrives on the connection before the answer to
 * the statement that committed, so a count read after that answer includes it.
 */
const syncRepCancels = new WeakMap<Db, { waits: number }>();

/**
 * True for the WARNING PostgreSQL sends when a commit's wait for its synchronous standby ends without the
 * standby's confirmation: "canceling wait for synchronous replication due to user request" (a cancel:
 * `pg_cancel_backend`, a pooler's query timeout) or "… and terminating connection due to administrator
 * command". The commit stays, locally only and visible to others, and the statement still answers
 * success; the warning is the only sign. Recognised by the routine that raises it (`SyncRepWaitForLSN`,
 * the notice's `R` field, not translated by `lc_messages`): PostgreSQL manual, "Synchronous Replication"
 * and 55.8 "Error and Notice Message Fields".
 */
export function isSyncRepCancel(notice: { routine?: unknown; severity?: unknown }): boolean {
  return notice.routine === "SyncRepWaitForLSN" && notice.severity === "WARNING";
}

/**
 * `code` of the error {@link refuseUnreplicated} throws: a commit made while `work` ran stopped waiting for
 * the synchronous standby; it is saved on the primary only and may be gone after a failover. Transient:
 * the receiver answers 503, and a retry that finds the row waits for the standby (inbox.ts
 * `lockRecorded`) before it answers `duplicate`.
 */
export const COMMIT_NOT_REPLICATED = "COMMIT_NOT_REPLICATED";

/**
 * Runs `work` (a delivery's database work on `db`) and passes on its result, unless PostgreSQL warned a
 * connection of `db` meanwhile that a commit stopped waiting for the synchronous standby
 * ({@link isSyncRepCancel}): then it throws an Error whose code is {@link COMMIT_NOT_REPLICATED}, so what
 * committed without the standby is never acknowledged. Conservative: the warning names no transaction, so
 * every delivery running on the pool at that moment fails (each is a 503 the provider retries). A pool
 * not made by {@link connect} is never refused.
 * @throws whatever `work` throws; Error `COMMIT_NOT_REPLICATED` as above.
 */
export async function refuseUnreplicated<T>(db: Db, work: () => Promise<T>): Promise<T> {
  const counter = syncRepCancels.get(db);
  const before = counter?.waits ?? 0;
  const result = await work();
  if (counter && counter.waits !== before)
    throw Object.assign(
      new Error(
        "PostgreSQL stopped waiting for the synchronous standby to confirm a commit (canceled: a pg_cancel_backend or a pooler's query timeout): " +
          "it is saved on the primary only, so it is not acknowledged",
      ),
      { code: COMMIT_NOT_REPLICATED },
    );
  return result;
}

/** The SQLSTATE of a PostgreSQL error, or undefined for anything else. */
export function sqlState(err: unknown): string | undefined {
  if (err instanceof postgres.PostgresError) return err.code;
  return undefined;
}

/**
 * True when the error means the database could not be reached or dropped the connection
 * (network errors from postgres.js, server shutdown, too many connections), or the server reached is
 * not a primary (25006, a write refused by a standby: behind HAProxy, Patroni's `GET /primary` answers
 * 200 from the moment a node takes the leader key, a moment before its PostgreSQL finishes promoting),
 * or a call was given up (QUERY_STUCK, COMMIT_UNCONFIRMED, COMMIT_NOT_REPLICATED). Such failures are
 * transient: the right answer is 503 and a retry, never a 4xx.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  const state = sqlState(err);
  if (state)
    return (
      (state.startsWith("08") && !isStartupRefusal(err)) ||
      state.startsWith("57P") ||
      state === SQLSTATE.tooManyConnections ||
      state === SQLSTATE.readOnlyTransaction
    );
  const code = (err as { code?: unknown } | null)?.code;
  return (
    typeof code === "string" &&
    [
      "CONNECTION_CLOSED",
      "CONNECTION_ENDED",
      "CONNECTION_DESTROYED",
      "CONNECT_TIMEOUT",
      "QUERY_STUCK",
      COMMIT_UNCONFIRMED,
      COMMIT_NOT_REPLICATED,
      "ECONNREFUSED",
      "ECONNRESET",
      "EPIPE",
      "ETIMEDOUT",
    ].includes(code)
  );
}

/**
 * PgBouncer's refusals of a client login that no wait can fix, all SQLSTATE 08P01 like its transient
 * ones (server_login_retry, query_wait_timeout, "no more connections allowed", "database … is not
 * available"): a startup parameter it does not accept (`ignore_startup_parameters`), a database or user
 * it does not know. PgBouncer documentation, "Configuration"; src/client.c in its sources.
 */
const STARTUP_REFUSALS = /unsupported startup parameter|no such database|no such user|unsupported pkt type/i;

/**
 * How long past its own bound a database call may go unanswered before the client gives up on it, ms.
 * The server ends a statement at `statement_timeout` and a stalled transaction at
 * `idle_in_transaction_session_timeout` ({@link boundTransaction}); a call still pending this long after
 * that is on a connection nothing will ever answer (a half-open socket after a failover, or postgres.js
 * losing a query while it reconnects to another host: docs/failover.md).
 */
export const STUCK_SLACK_MS = 5_000;

/**
 * `promise`, or a rejection after `ms` milliseconds with an Error whose `code` is `QUERY_STUCK` (which
 * {@link isDatabaseUnavailable} counts as transient: a receiver answers 503, a worker retries the row
 * after its lease). Giving up does not cancel the call: if it completes later, what it commits is
 * what the inbox meets on the retry (a duplicate), so nothing is applied twice; its connection stays
 * with the pool until the driver closes it.
 */
export function settleWithin<T>(promise: PromiseLike<T>, ms: number, what: string): Promise<T> {
  const stuck = () => {
    const message = `${what} had no answer from PostgreSQL within ${Math.round(ms)} ms: its connection is lost, or its commit waits for a synchronous standby`;
    return Object.assign(new Error(message), { code: "QUERY_STUCK" });
  };
  return within(Promise.resolve(promise), ms, stuck);
}

/**
 * `code` of the error {@link beginWithin} throws when it stops waiting for the answer to a COMMIT: the
 * transaction may still commit (or not). Transient, counted as the database unavailable: the receiver
 * answers 503, a worker's row is claimed again after its lease.
 */
export const COMMIT_UNCONFIRMED = "COMMIT_UNCONFIRMED";

/**
 * Shortest wait for a transaction's connection (and BEGIN) and for the answer to its COMMIT, ms, however
 * short its bound: a bound of a few ms is for its statements (PostgreSQL stops them), not for these.
 */
export const MIN_WAIT_MS = 1_000;

/**
 * `db.begin(work)` bounded at both ends the server cannot bound, each ending in a rejection while the
 * transaction commits nothing or may still commit, never in a cancel:
 * - its start: a transaction that has no connection (its BEGIN answered) by `deadline` (ms since the
 *   epoch), or {@link MIN_WAIT_MS} from now when that is later, is given up then (every connection of the
 *   pool busy, say each waiting for a COMMIT), with an Error whose code is `QUERY_STUCK`; when a connection
 *   frees later it runs nothing of `work` and rolls back, so work queued behind stuck connections never
 *   runs late;
 * - its COMMIT: the caller stops waiting for the answer at `deadline`, or {@link MIN_WAIT_MS} after the
 *   COMMIT went out when that is later, with an Error whose code is {@link COMMIT_UNCONFIRMED}. The
 *   statements before it are bounded on the server ({@link boundTransaction}); the COMMIT is not:
 *   `statement_timeout` does not cover its wait for a synchronous standby, which lasts as long as no
 *   standby confirms (PostgreSQL manual, "Synchronous Replication": "The response may never occur if the
 *   last, or only, standby should crash"). It is never cancelled: a cancelled wait keeps the commit on the
 *   primary only, visible and unreplicated (Patroni documentation, "Replication modes", the note under
 *   "Synchronous mode"). It completes or not on its own; what it commits is what the inbox key meets on
 *   the retry (a duplicate).
 * `what` names the transaction in the messages.
 * @throws whatever `db.begin` throws; Error `QUERY_STUCK` or `COMMIT_UNCONFIRMED` as above.
 */
export function beginWithin<T>(db: Db, deadline: number, what: string, work: (tx: Tx) => Promise<T>): Promise<T> {
  let gaveUp = false;
  let commitTimer: ReturnType<typeof setTimeout> | undefined;
  return new Promise<T>((resolve, reject) => {
    const fail = (code: string, message: string) => reject(Object.assign(new Error(message), { code }));
    const startMs = Math.max(deadline - Date.now(), MIN_WAIT_MS);
    const startTimer = setTimeout(() => {
      gaveUp = true;
      fail(
        "QUERY_STUCK",
        `${what} got no connection within ${Math.round(startMs)} ms (every connection of the pool is busy): nothing was done`,
      );
    }, startMs);
    db.begin(async (tx) => {
      clearTimeout(startTimer);
      if (gaveUp) throw new Error(`${what} got its connection after its caller gave up: nothing was done`);
      const result = await work(tx);
      const ms = Math.max(deadline - Date.now(), MIN_WAIT_MS);
      commitTimer = setTimeout(
        () =>
          fail(
            COMMIT_UNCONFIRMED,
            `${what} had no answer to its COMMIT within ${Math.round(ms)} ms (is a synchronous standby missing? synchronous_standby_names): ` +
              "not acknowledged; if it commits later, the retry is a duplicate",
          ),
        ms,
      );
      return result as T;
    }).then(
      (result) => (clearTimeout(startTimer), clearTimeout(commitTimer), resolve(result as T)),
      (err: unknown) => (clearTimeout(startTimer), clearTimeout(commitTimer), reject(err)),
    );
  });
}

/** True for an 08P01 startup refusal from a pooler that retrying cannot fix (see STARTUP_REFUSALS). */
export function isStartupRefusal(err: unknown): boolean {
  return sqlState(err) === "08P01" && err instanceof Error && STARTUP_REFUSALS.test(err.message);
}

/**
 * True for errors that no retry can fix because of the data itself: SQLSTATE class 22 "data
 * exception" (e.g. a `\u0000` or lone surrogate that jsonb rejects, a number out of range) and class
 * 54 "program limit exceeded" (JSON nested too deep, a key too long for an index). PostgreSQL manual,
 * Appendix A.
 */
export function isDataError(err: unknown): boolean {
  const state = sqlState(err);
  return state !== undefined && (state.startsWith("22") || state.startsWith("54"));
}

/** A failure that retrying the same event cannot fix: a PermanentError, or a data error from PostgreSQL. */
export function isPermanent(err: unknown): boolean {
  return err instanceof PermanentError || isDataError(err);
}

/** Shortest bound on a client's pause inside a transaction, ms: a bound that ends sessions must not end them for an ordinary pause of the event loop. */
const MIN_IDLE_BOUND_MS = 1_000;

/**
 * Bounds the transaction `tx` on the server: each statement by `statement_timeout` = `timeoutMs` (lock
 * waits included; SQLSTATE 57014 when it fires, and the transaction rolls back), and each pause of the
 * client inside it by `idle_in_transaction_session_timeout` = `timeoutMs`, at least 1 s (a client stalled
 * mid-transaction, a paused process, loses its session and with it its locks). Both are set with
 * `set_config(…, true)` (SET LOCAL: this transaction only, so it works behind a transaction pooler). A
 * process killed mid-transaction never sends COMMIT, so nothing of it commits, and PostgreSQL ends its
 * statements at the bound. Awaited, not pipelined ahead of the next statement: postgres.js re-prepares
 * a statement a transaction pooler's server connection does not know, and a re-prepared statement
 * pipelined ahead of another left the connection waiting forever (test/runtimes/pgbouncer.test.ts).
 * The same statement sets `webhook_inbox.traceparent` to `traceparent` (or '' when tracing is off),
 * which outbox rows written in the transaction take as their `traceparent` (sql/0023_traceparent.sql),
 * and takes `shared.key`'s transaction-level advisory lock SHARED for each of `shared.names`
 * (`pg_advisory_xact_lock_shared(key, hashtext(name))`, sorted, once each; none when the list is empty):
 * the inbox's pause locks (inbox/pauses.ts). In the same statement, not a second one pipelined behind it
 * (see above); the bounds set here apply from the next statement, so this one's lock wait is bounded by
 * the holder of the exclusive lock, which bounds its own transaction.
 * Call first in the transaction. PostgreSQL manual, "Client Connection Defaults", "Customized Options"
 * and "Advisory Lock Functions".
 */
export async function boundTransaction(
  tx: Tx,
  timeoutMs: number,
  traceparent = "",
  shared: { key: number; names: readonly string[] } = { key: 0, names: [] },
): Promise<void> {
  const ms = Math.max(1, Math.ceil(timeoutMs));
  const idle = String(Math.max(ms, MIN_IDLE_BOUND_MS));
  const names = [...new Set(shared.names)].sort();
  await tx`
    select set_config('statement_timeout', ${String(ms)}, true), set_config('idle_in_transaction_session_timeout', ${idle}, true),
           set_config('webhook_inbox.traceparent', ${traceparent}, true),
           (select count(pg_advisory_xact_lock_shared(${shared.key}::int, hashtext(n.e))) from unnest(${names}::text[]) as n (e)) as locked
  `;
}
