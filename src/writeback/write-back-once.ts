import type { Db } from "../db/db.ts";
import { PermanentError } from "../errors.ts";

/** Which write-back: the provider, the event it answers, and a code-constant operation name. */
export interface WriteBackSpec {
  /** 'stripe', …: keeps the key spaces of providers apart. */
  provider: string;
  /** Provider event id (Stripe: evt_…). */
  eventId: string;
  /** A code constant in kebab-case, e.g. `update-customer-metadata`; never data from the event. */
  operation: string;
}

/** What the provider call returns: the id of the object it created or changed, and what to keep. */
export interface WriteBackResult {
  id: string;
  /** Small, non-personal facts worth keeping (stored as jsonb for as long as the record lives). */
  details?: Record<string, unknown>;
}

/** The recorded outcome of a write-back. */
export interface WriteBack {
  key: string;
  resultId: string;
  details: Record<string, unknown>;
  /** False when a completed record was found and the provider was not called. */
  called: boolean;
}

/** Options of {@link writeBackOnce}. */
export interface WriteBackOptions {
  /**
   * A started, never completed record older than this (ms) is in doubt: the provider may have
   * forgotten its key, so calling again could repeat the effect. Default 23 h, under Stripe's
   * "keys may be removed after at least 24 hours".
   */
  inDoubtAfterMs?: number;
}

const SAFE_PART = /^[A-Za-z0-9_-]+$/;
const OPERATION = /^[a-z0-9]+(?:[-.][a-z0-9]+)*$/;
/** Longest Idempotency-Key Stripe accepts, in characters (Stripe API reference, "Idempotent requests"). */
export const MAX_KEY_LENGTH = 255;

/**
 * The deterministic idempotency key of a write-back (seed §8): `webhook:<event_id>:<operation>`, the
 * same on every retry, so the provider recognises a repeated call. Stripe accepts up to 255
 * characters and asks for no personal data in keys: event ids and code-constant operation names are
 * neither, and the charset (letters, digits, `_`, `-`, `.`) rules out e-mail addresses and free text.
 * @throws PermanentError naming the part that is empty, unsafe, or makes the key longer than 255.
 */
export function writeBackKey(eventId: string, operation: string): string {
  if (!SAFE_PART.test(eventId))
    throw new PermanentError("Cannot derive a write-back key: the event id is empty or has characters other than letters, digits, _ and -");
  if (!OPERATION.test(operation))
    throw new PermanentError(`Cannot derive a write-back key: operation "${operation}" is not a lowercase kebab-case constant`);
  const key = `webhook:${eventId}:${operation}`;
  if (key.length > MAX_KEY_LENGTH)
    throw new PermanentError(`Cannot derive a write-back key: ${key.length} characters, the limit is ${MAX_KEY_LENGTH}`);
  return key;
}

/**
 * A started write-back that never completed and is older than the provider's key lifetime: it may
 * have taken effect, and a new call might repeat it. Not retried: an operator checks the provider
 * (the key and event id are in the message) and records the result or deletes the record.
 */
export class WriteBackInDoubtError extends PermanentError {
  constructor(key: string, ageMs: number) {
    super(
      `Cannot repeat write-back ${key}: started ${Math.round(ageMs / 3_600_000)} h ago without a recorded result, and the provider may have forgotten its idempotency key`,
    );
    this.name = "WriteBackInDoubtError";
  }
}

interface Row {
  result_id: string | null;
  result: Record<string, unknown> | null;
  age_ms: number;
}

/**
 * Calls the provider at most once in effect, however late the retry (seed §8): records a `started`
 * row keyed by {@link writeBackKey} (`insert … on conflict do nothing`), then
 * - a completed record exists → returns it, `called: false`, without calling (even days later, when
 *   the provider has forgotten the key);
 * - a started record older than `inDoubtAfterMs` → throws {@link WriteBackInDoubtError};
 * - otherwise → `call(key)` (send the key as `Idempotency-Key`, with parameters derived only from
 *   the event, so a repeated call is the same request), then records its result and returns it.
 * A crash between the call and the record leaves the started row: the retry calls again with the same
 * key, the provider answers with the first result (within its key lifetime), and that is recorded.
 * Concurrent callers for one key both call, with the same key, and the provider deduplicates them
 * (Stripe answers an in-flight duplicate with 409, a finished one with the stored response); the first
 * record wins and both return it. No transaction or lock is held during the call.
 * `db` must be the pool, never a transaction: the record must survive the caller's rollback.
 * @throws whatever `call` throws (nothing is recorded then; a retry calls again with the same key),
 *   PermanentError for an unusable key, WriteBackInDoubtError, or a database error.
 */
export async function writeBackOnce(
  db: Db,
  spec: WriteBackSpec,
  call: (idempotencyKey: string) => Promise<WriteBackResult>,
  options: WriteBackOptions = {},
): Promise<WriteBack> {
  const key = writeBackKey(spec.eventId, spec.operation);
  const inDoubtAfterMs = options.inDoubtAfterMs ?? 23 * 3_600_000;
  const started = await startWriteBack(db, spec, key);
  if (started.result_id !== null) return { key, resultId: started.result_id, details: started.result ?? {}, called: false };
  if (started.age_ms > inDoubtAfterMs) throw new WriteBackInDoubtError(key, started.age_ms);
  const result = await call(key);
  if (typeof result?.id !== "string" || result.id === "")
    throw new Error(`Cannot record write-back ${key}: the call returned no object id`);
  const recorded = await completeWriteBack(db, spec.provider, key, result);
  return { key, resultId: recorded.result_id ?? result.id, details: recorded.result ?? {}, called: true };
}

/** Inserts the started record, or reads the existing one (a retry, or a concurrent caller). */
async function startWriteBack(db: Db, spec: WriteBackSpec, key: string): Promise<Row> {
  const [inserted] = await db<Row[]>`
    insert into provider_writebacks (provider, idempotency_key, operation, event_id)
    values (${spec.provider}, ${key}, ${spec.operation}, ${spec.eventId})
    on conflict (provider, idempotency_key) do nothing
    returning result_id, result, 0 as age_ms
  `;
  if (inserted) return inserted;
  // A new statement: it sees the conflicting row, which the insert waited for until it committed.
  const [existing] = await db<Row[]>`
    select result_id, result, (extract(epoch from now() - created_at) * 1000)::float8 as age_ms
      from provider_writebacks
     where (provider, idempotency_key) = (${spec.provider}, ${key})
  `;
  if (!existing) throw new Error(`Cannot start write-back ${key}: its record vanished while it was being read`);
  return existing;
}

/** Records the result unless a concurrent caller already did; returns the record that stands. */
async function completeWriteBack(db: Db, provider: string, key: string, result: WriteBackResult): Promise<Row> {
  const details = db.json((result.details ?? {}) as Parameters<Db["json"]>[0]);
  const [completed] = await db<Row[]>`
    update provider_writebacks
       set result_id = ${result.id},
           result = ${details},
           completed_at = now()
     where (provider, idempotency_key) = (${provider}, ${key})
       and completed_at is null
    returning result_id, result, 0::float8 as age_ms
  `;
  if (completed) return completed;
  // A concurrent caller recorded first (a new statement sees its commit): its record stands.
  const [existing] = await db<Row[]>`
    select result_id, result, 0::float8 as age_ms
      from provider_writebacks
     where (provider, idempotency_key) = (${provider}, ${key})
       and completed_at is not null
  `;
  if (!existing) throw new Error(`Cannot record write-back ${key}: its started record is missing`);
  return existing;
}
