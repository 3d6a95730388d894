import type Stripe from "stripe";
import type { Claim } from "./claim.ts";
import { withStripeRetry, type StripeRetryOptions } from "../stripe-api/retry.ts";
import { PermanentError } from "../errors.ts";
import { EVENT_GENERATION_RESOLVED, readThinNotification } from "../providers/stripe-thin.ts";

/** A window of event creation times to backfill, from a health notification. */
export interface BackfillWindow {
  start: Date;
  end: Date;
}

/**
 * What a claimed row needs after the API was read:
 * - `apply`: run the Stripe handler of `eventType` on `object` (the object's current state), with
 *   `changeId` (the classic event of the change) for the change claim;
 * - `missing`: Stripe no longer has the object (404 `resource_missing`): settled, never retried;
 * - `backfill`: a health notification: request an event backfill of `window`;
 * - `ignored`: nothing to fetch or apply (a thin type without a handler).
 */
export type Resolution =
  | { kind: "apply"; eventType: string; object: Record<string, unknown>; changeId: string }
  | { kind: "missing"; error: string }
  | { kind: "backfill"; window: BackfillWindow }
  | { kind: "ignored" };

/** Reads from Stripe what a claimed row needs ({@link stripeFetcher}). */
export interface Fetcher {
  /** True when the row must be read from the API before it is applied: every thin row, classic rows of refetch endpoints. */
  needsFetch(claim: Pick<Claim, "provider" | "endpoint">): boolean;
  /**
   * Reads what `claim` points to, rate limited, retrying 429/409/5xx/connection errors with backoff.
   * @throws the API error when tries run out (the caller defers the row without using an attempt), or
   *   PermanentError for a row no fetch can help (a classic event whose object has no id).
   */
  resolve(claim: Claim & { payload: Record<string, unknown> }): Promise<Resolution>;
}

/** Settings of {@link stripeFetcher}. */
export interface FetcherOptions {
  /** stripe-node client at `STRIPE_API_BASE` with `STRIPE_API_KEY` (stripe-api/client.ts). */
  stripe: Stripe;
  /** Classic endpoints in refetch mode (`INBOX_REFETCH_<NAME>=true`). */
  refetchEndpoints: ReadonlySet<string>;
  /** API requests started per second at most, across the worker's slots; default 20 (below Stripe's read limits). */
  requestsPerSecond?: number;
  /** Backoff of each request ({@link withStripeRetry}); default 4 tries from 250 ms. */
  retry?: StripeRetryOptions;
  /** Event types with a Stripe handler (the classic names): other thin types are `ignored` without a fetch. */
  handledTypes: ReadonlySet<string>;
  /** How far before `resolved_at` a health window starts when the event names no start; default 24 h. */
  healthLookbackMs?: number;
}

/** Where a classic object type is read: Stripe API paths of the objects the Stripe handlers apply. */
const RESOURCE_PATH: Readonly<Record<string, string>> = {
  invoice: "invoices",
  charge: "charges",
  refund: "refunds",
  dispute: "disputes",
  invoice_payment: "invoice_payments",
  payment_intent: "payment_intents",
};

/**
 * A {@link Fetcher} over stripe-node. Thin rows: the stored notification is rebuilt with stripe-node's
 * `parseEventNotificationWithoutVerification` (it was verified on receipt) and read with its own
 * `fetchRelatedObject()` (GET of `related_object.url` as given) or, for the health type, `fetchEvent()`
 * (GET `/v2/core/events/<id>`); `v1.<type>` is applied by the handler of `<type>`. Refetch rows: GET
 * `/v1/<resource>/<id>` of the classic event's `data.object`. Requests share one rate limit.
 */
export function stripeFetcher(options: FetcherOptions): Fetcher {
  const limit = createRateLimit(options.requestsPerSecond ?? 20);
  const retry: StripeRetryOptions = { attempts: 4, baseMs: 250, maxMs: 4_000, ...options.retry };
  const call = <T>(request: () => Promise<T>): Promise<T> =>
    withStripeRetry(async () => {
      await limit();
      return request();
    }, retry);
  const lookbackMs = options.healthLookbackMs ?? 24 * 3_600_000;

  return {
    needsFetch: (claim) =>
      claim.provider === "stripe-thin" || (claim.provider === "stripe" && options.refetchEndpoints.has(claim.endpoint)),
    async resolve(claim) {
      if (claim.provider === "stripe-thin") {
        const stored = readThinNotification(claim.payload);
        // Every notification type has fetchEvent; those with a related_object also fetchRelatedObject.
        const notification = options.stripe.parseEventNotificationWithoutVerification(JSON.stringify(stored)) as unknown as {
          fetchEvent(): Promise<unknown>;
          fetchRelatedObject(): Promise<unknown>;
        };
        if (stored.type === EVENT_GENERATION_RESOLVED) {
          const event = (await call(() => notification.fetchEvent())) as unknown as Record<string, unknown>;
          return { kind: "backfill", window: healthWindow(event, stored.created, lookbackMs) };
        }
        const classicType = stored.type.startsWith("v1.") ? stored.type.slice(3) : undefined;
        if (!classicType || !options.handledTypes.has(classicType) || !stored.related_object) return { kind: "ignored" };
        const related = stored.related_object;
        const object = await missingAsUndefined(() => call(() => notification.fetchRelatedObject()));
        if (object === undefined) return missing(related.type, related.id);
        return {
          kind: "apply",
          eventType: classicType,
          object: object as Record<string, unknown>,
          changeId: stored.snapshot_event ?? stored.id,
        };
      }
      const current = (claim.payload.data as { object?: Record<string, unknown> } | undefined)?.object;
      const type = typeof current?.object === "string" ? current.object : undefined;
      const id = typeof current?.id === "string" ? current.id : undefined;
      const path = type === undefined ? undefined : RESOURCE_PATH[type];
      if (!current || !id || !path || !/^[A-Za-z0-9_]{1,250}$/.test(id)) {
        if (!options.handledTypes.has(claim.eventType)) return { kind: "ignored" };
        throw new PermanentError(`Cannot refetch ${claim.eventId}: its data.object has no id or an object type without an API path`);
      }
      const object = await missingAsUndefined(() => call(() => options.stripe.rawRequest("GET", `/v1/${path}/${id}`) as Promise<unknown>));
      if (object === undefined) return missing(type ?? "object", id);
      return { kind: "apply", eventType: claim.eventType, object: object as Record<string, unknown>, changeId: claim.eventId };
    },
  };
}

function missing(type: string, id: string): Resolution {
  return { kind: "missing", error: `Stripe no longer has ${type} ${id} (404 resource_missing): nothing to apply` };
}

/** Runs `read`; a 404 `resource_missing` becomes undefined, anything else is thrown. */
async function missingAsUndefined<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    const e = err as { statusCode?: unknown; code?: unknown } | null;
    if (e?.statusCode === 404 && e.code === "resource_missing") return undefined;
    throw err;
  }
}

/**
 * The window a `v2.core.health.event_generation_failure.resolved` event reports: `data.resolved_at` (else the
 * notification's `created`) as its end; `data.started_at` or `data.impact.started_at` as its start, else the
 * end minus `lookbackMs` (a wider window costs API reads, never a double effect: backfilled events go through
 * the inbox key like any other).
 * @throws PermanentError when no end can be read.
 */
export function healthWindow(event: Record<string, unknown>, created: string, lookbackMs: number): BackfillWindow {
  const data = (event.data ?? {}) as Record<string, unknown>;
  const impact = (data.impact ?? {}) as Record<string, unknown>;
  const time = (v: unknown): Date | undefined => {
    if (typeof v !== "string") return undefined;
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? undefined : d;
  };
  const end = time(data.resolved_at) ?? time(created);
  if (!end) throw new PermanentError("Cannot read the health event's window: no resolved_at and no created time");
  const start = time(data.started_at) ?? time(impact.started_at) ?? new Date(end.getTime() - lookbackMs);
  return { start: start <= end ? start : end, end };
}

/**
 * A limit of `perSecond` request starts per second shared by every caller: each call waits for the next
 * free slot (slots are `1000 / perSecond` ms apart). Keeps the worker's slots together under Stripe's rate
 * limits instead of each meeting 429s on its own.
 */
export function createRateLimit(perSecond: number): () => Promise<void> {
  const spacingMs = 1_000 / perSecond;
  let next = 0;
  return async () => {
    const now = Date.now();
    const at = Math.max(now, next);
    next = at + spacingMs;
    if (at > now) await new Promise((r) => setTimeout(r, at - now));
  };
}
