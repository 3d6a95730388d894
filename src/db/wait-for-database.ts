// Waiting for PostgreSQL at start-up: a command started while the database restarts (or before its
// container is up) waits for it instead of dying with a connection error. Portable: postgres.js only.
import postgres from "postgres";
import { isCertificateRefusal } from "./connect-failure.ts";
import { isDatabaseUnavailable, type Db } from "./db.ts";
import { sleep, within } from "./sleep.ts";

/** Options of {@link waitForDatabase}; times in ms. */
export interface WaitForDatabaseOptions {
  /** Longest total wait before giving up (`DATABASE_WAIT_MS`); 0 tries once. */
  limitMs: number;
  /** Aborting stops the wait at the next pause and rejects with `signal.reason`. */
  signal?: AbortSignal;
  /** Called once per failed attempt with one line for operators (never the URL or password). */
  log?: (line: string) => void;
  /** First pause between attempts, doubled after each, up to `maxDelayMs`. Default 200. */
  firstDelayMs?: number;
  /** Longest pause between attempts. Default 5000. */
  maxDelayMs?: number;
  /**
   * Longest wait for one attempt's answer, ms, never past the overall limit (but at least 1 s). Default
   * 5000. A pooler whose server is down keeps the probe waiting (PgBouncer: up to query_wait_timeout).
   */
  attemptMs?: number;
  /** Clock, ms. Default `Date.now`. */
  now?: () => number;
}

/** The database did not answer within the limit, or refused in a way no wait can fix. */
export class DatabaseWaitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DatabaseWaitError";
  }
}

/** Network failures while the host (or its name) is not there yet, e.g. a container starting. */
const NOT_YET_THERE = ["ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ECONNABORTED"];

/**
 * Sends `select 1` on `db` until it answers, pausing 200 ms, 400 ms, … up to 5 s between attempts,
 * for at most `limitMs` in all. Each attempt waits at most `attemptMs` for its answer (a pooler queues
 * the probe while its server is down; the probe may still run later, harmlessly). Only failures that
 * mean "not reachable yet" are retried: refused or reset connections, timeouts, no answer, a server
 * starting up or shutting down (SQLSTATE 57P…), too many connections, a pooler's transient 08P01
 * (server_login_retry, query_wait_timeout), an unknown host. Anything else (a wrong password, a missing
 * database, a startup parameter a pooler refuses) fails at once.
 * Resolves with the number of attempts made.
 * @throws DatabaseWaitError whose one-line message names the last failure by its code or server
 *   message (never the URL, which may hold the password) and the limit; `signal.reason` when aborted.
 */
export async function waitForDatabase(db: Db, options: WaitForDatabaseOptions): Promise<number> {
  const now = options.now ?? Date.now;
  const deadline = now() + options.limitMs;
  let delay = options.firstDelayMs ?? 200;
  for (let attempt = 1; ; attempt++) {
    options.signal?.throwIfAborted();
    try {
      const bound = Math.min(options.attemptMs ?? 5_000, Math.max(deadline - now(), 1_000));
      await untilAborted(answerWithin(db`select 1`, bound, "select 1"), options.signal);
      return attempt;
    } catch (err) {
      options.signal?.throwIfAborted();
      const why = describeFailure(err);
      if (!isWorthWaiting(err)) throw new DatabaseWaitError(`the database refused the connection: ${why}`);
      const left = deadline - now();
      if (left <= 0) {
        throw new DatabaseWaitError(
          `the database did not answer within ${seconds(options.limitMs)} (${attempt} attempt${attempt === 1 ? "" : "s"}, last: ${why}); DATABASE_WAIT_MS sets how long to wait`,
        );
      }
      const pause = Math.min(delay, left);
      options.log?.(
        `Waiting for the database: attempt ${attempt} failed (${why}); next in ${seconds(pause)}, giving up ${seconds(left)} from now`,
      );
      await sleep(pause, options.signal); // an abort ends it: the loop then throws signal.reason
      delay = Math.min(delay * 2, options.maxDelayMs ?? 5_000);
    }
  }
}

function isWorthWaiting(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  // isDatabaseUnavailable already leaves out a pooler's permanent 08P01 refusals (isStartupRefusal).
  return isDatabaseUnavailable(err) || code === NO_ANSWER || (typeof code === "string" && NOT_YET_THERE.includes(code));
}

/** `code` of the error {@link answerWithin} rejects with: the probe got no answer in time. */
const NO_ANSWER = "DATABASE_NO_ANSWER";

/**
 * Settles like `work`, or rejects after `ms` with an Error whose `code` is {@link NO_ANSWER}. `work` is
 * not stopped (a probe `select 1` that runs later is harmless). Needed where nothing else bounds the
 * wait: PgBouncer keeps a client waiting for a server connection up to `query_wait_timeout`.
 */
function answerWithin<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  return within(work, ms, () =>
    Object.assign(new Error(`${what}: the database did not answer within ${seconds(ms)}`), { code: NO_ANSWER }),
  );
}

/**
 * A failure in words that never include the URL: the server's own message with its SQLSTATE, or the
 * client's error code (postgres.js network messages name host and port, which is all they add).
 */
function describeFailure(err: unknown): string {
  if (err instanceof postgres.PostgresError) return `${err.message} (SQLSTATE ${err.code})`;
  const code = (err as { code?: unknown } | null)?.code;
  if (code === NO_ANSWER && err instanceof Error) return err.message;
  if (isCertificateRefusal(err) && err instanceof Error)
    return `its TLS certificate not accepted (${err.message.trim()}, ${String(code)}): check sslrootcert and the URL's host name`;
  return typeof code === "string" ? code : err instanceof Error ? err.name : "unknown error";
}

/** `work`, or `signal.reason` as soon as the signal is aborted (the work itself is not stopped). */
function untilAborted<T>(work: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return work;
  let onAbort = () => {};
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  return Promise.race([work, aborted]).finally(() => signal.removeEventListener("abort", onAbort));
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}
