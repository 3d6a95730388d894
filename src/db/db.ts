import postgres from "postgres";
import { PermanentError } from "../errors.ts";
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
  /** "prepared statement … does not exist": a statement cached on another server connection (transaction pooler). */
  invalidSqlStatementName: "26000",
  /** Raised by `webhook_inbox_ungated()` (sql/0012): a one-statement handler found nothing to apply (a duplicate, or a row already settled) but one of its steps wrote. */
  nothingToApply: "WI001",
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
   * Session `statement_timeout`, ms, enforced by the server: a statement of a process that was killed
   * (SIGKILL) while it waited on a lock is cancelled by PostgreSQL, which then notices the client is
   * gone and ends the backend, releasing its locks. A client-side cancel cannot do that once the
   * client is dead. Not sent behind a transaction pooler, which refuses startup parameters (SET LOCAL
   * inside transactions still works there). PostgreSQL manual, "Client Connection Defaults".
   */
  statementTimeoutMs?: number;
}

/**
 * Opens a postgres.js pool. Connections are lazy: nothing is contacted until the first query.
 * Reconnect backoff is bounded (≤ 1 s) so a short database restart is a short outage, not ~20 s
 * of 5xx (postgres.js's default backoff grows with attempts).
 * @throws Error when the postgres.js loaded is not the patched one ({@link assertPatchedPostgres}).
 */
export function connect(url: string, options: ConnectOptions = {}): Db {
  assertPatchedPostgres();
  return postgres(url, {
    max: options.max ?? 10,
    connect_timeout: options.connectTimeoutSec ?? 5,
    idle_timeout: 60,
    max_lifetime: 60 * 30,
    prepare: options.pooler === "transaction" ? false : (options.prepare ?? true),
    backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 1),
    onnotice: () => {},
    connection: {
      application_name: options.applicationName ?? "webhook-inbox",
      ...(options.statementTimeoutMs !== undefined && options.pooler !== "transaction"
        ? { statement_timeout: options.statementTimeoutMs }
        : {}),
    },
  });
}

/**
 * True when PostgreSQL rolled the whole transaction back because of a concurrent one, so the same
 * transaction tried again may succeed: SQLSTATE 40P01 (deadlock_detected) or 40001
 * (serialization_failure), PostgreSQL manual, 13.4 "Serialization Failure Handling"; or a cancel meant
 * for another statement of the connection ({@link isStrayCancel}).
 */
export function isRetryableConflict(err: unknown): boolean {
  const state = sqlState(err);
  return state === SQLSTATE.deadlockDetected || state === SQLSTATE.serializationFailure || isStrayCancel(err);
}

/** The SQLSTATE of a PostgreSQL error, or undefined for anything else. */
export function sqlState(err: unknown): string | undefined {
  if (err instanceof postgres.PostgresError) return err.code;
  return undefined;
}

/**
 * True when the error means the database could not be reached or dropped the connection
 * (network errors from postgres.js, server shutdown, too many connections). Such failures are
 * transient: the right answer is 503 and a retry, never a 4xx.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  const state = sqlState(err);
  if (state) return (state.startsWith("08") && !isStartupRefusal(err)) || state.startsWith("57P") || state === SQLSTATE.tooManyConnections;
  const code = (err as { code?: unknown } | null)?.code;
  return (
    typeof code === "string" &&
    [
      "CONNECTION_CLOSED",
      "CONNECTION_ENDED",
      "CONNECTION_DESTROYED",
      "CONNECT_TIMEOUT",
      "ECONNREFUSED",
      "ECONNRESET",
      "EPIPE",
      "ETIMEDOUT",
      NO_ANSWER,
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

/** True for an 08P01 startup refusal from a pooler that retrying cannot fix (see STARTUP_REFUSALS). */
export function isStartupRefusal(err: unknown): boolean {
  return sqlState(err) === "08P01" && err instanceof Error && STARTUP_REFUSALS.test(err.message);
}

/**
 * `code` of the error {@link answerWithin} rejects with: the database (or a pooler in front of it,
 * which queues a client's query until it gets a server connection) did not answer in time. Counted
 * as database-unavailable. The statements may still run later: only a 5xx or a retry may follow.
 */
export const NO_ANSWER = "DATABASE_NO_ANSWER";

/**
 * Settles like `work`, or rejects after `ms` with an Error whose `code` is {@link NO_ANSWER} and whose
 * message names `what` and the bound in seconds. `work` is not stopped: whatever it sends may still
 * reach PostgreSQL and commit later, so a caller must treat the rejection as "unknown outcome" (a 5xx,
 * a retry, never a success). Needed where a cancel cannot reach: PgBouncer keeps a client waiting for a
 * server connection up to `query_wait_timeout` (120 s) and ignores its cancel request meanwhile.
 */
export function answerWithin<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  // One promise and one timer per call (no race of two promises and no finally chain): it is on every delivery.
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () =>
        reject(Object.assign(new Error(`${what}: the database did not answer within ${(ms / 1000).toFixed(1)} s`), { code: NO_ANSWER })),
      Math.max(0, ms),
    );
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
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

/**
 * Awaits `query` and cancels it from the client (PostgreSQL's cancel request) once it has run
 * `timeoutMs` milliseconds, lock waits included; `undefined` sets no bound. One statement needs no
 * `SET statement_timeout` round trip. Resolves with the query's result; rejects with its error, a
 * PostgresError with SQLSTATE 57014 (query_canceled) when the bound fired.
 * A cancel request names a backend, not a statement (PostgreSQL manual, 54.2.8 "Canceling Requests in
 * Progress"): one sent as the statement ends can stop the next statement that connection runs, a
 * neighbour's. The error of a statement this call cancelled is marked as its own, so
 * {@link isStrayCancel} tells a neighbour's stray cancel (safe to retry: the statement rolled back)
 * from a bound that fired.
 */
export async function cancelAfter<T>(query: PromiseLike<T> & { cancel(): unknown }, timeoutMs: number | undefined): Promise<T> {
  let fired = false;
  const timer =
    timeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          fired = true;
          void query.cancel();
        }, Math.max(0, timeoutMs));
  try {
    return await query;
  } catch (err) {
    if (fired && sqlState(err) === SQLSTATE.queryCanceled) (err as { [OWN_CANCEL]?: true })[OWN_CANCEL] = true;
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

const OWN_CANCEL = Symbol("webhook-inbox: cancelled by its own cancelAfter bound");

/**
 * True for a statement stopped by a cancel request it did not ask for: SQLSTATE 57014 "canceling
 * statement due to user request" (not a `statement_timeout`, whose message says so), and not the
 * bound of its own {@link cancelAfter}. Such a cancel was meant for the statement that ran before on
 * the same connection (or is an operator's `pg_cancel_backend`); the statement rolled back, so running
 * it again is safe.
 */
export function isStrayCancel(err: unknown): boolean {
  return (
    sqlState(err) === SQLSTATE.queryCanceled &&
    !(err as { [OWN_CANCEL]?: true })[OWN_CANCEL] &&
    /user request/.test((err as Error).message)
  );
}
