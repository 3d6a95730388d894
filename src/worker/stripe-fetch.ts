import type Stripe from "stripe";
import type { Claim } from "./claim.ts";
import { describeStripeFailure } from "../stripe-api/describe-failure.ts";
import { withStripeRetry, type StripeRetryOptions } from "../stripe-api/retry.ts";
import { PermanentError } from "../errors.ts";
import { EVENT_GENERATION_RESOLVED, readThinNotification } from "../providers/stripe-thin.ts";

/**
 * What a claimed row needs after the API was read:
 * - `apply`: run the row's handler on `object` (the object's current state, or for a health
 *   notification the full event), with `changeId` (the classic event of the change) for the change claim;
 * - `missing`: Stripe no longer has the object (404 `resource_missing`, or the notification points to
 *   none): the row is settled `object_missing`, never retried.
 */
export type Resolution = { kind: "apply"; object: Record<string, unknown>; changeId: string } | { kind: "missing"; error: string };

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
  /** One line about a failure `resolve` threw, naming the API's host:port (describeStripeFailure); undefined when it cannot say more than the error. */
  describeFailure?(err: unknown): string | undefined;
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
  /** `STRIPE_API_BASE` the client points at, named in failures (`describeFailure`); without it failures are described by the caller. */
  apiBase?: URL;
}

/** Where a classic object type is read: Stripe API paths of the objects the Stripe handlers apply. */
const RESOURCE_PATH: Readonly<Record<string, string>> = {
  invoice: "invoices",
  charge: "charges",
  refund: "refunds",
  dispute: "disputes",
  invoice_payment: "invoice_payments",
  payment_intent: "payment_intents",
  subscription: "subscriptions",
  "checkout.session": "checkout/sessions",
};

/**
 * A {@link Fetcher} over stripe-node. Thin rows: the stored notification is rebuilt with stripe-node's
 * `parseEventNotificationWithoutVerification` (it was verified on receipt) and read with its own
 * `fetchRelatedObject()` (GET of `related_object.url` as given) or, for the health type, `fetchEvent()`
 * (GET `/v2/core/events/<id>`). Refetch rows: GET `/v1/<resource>/<id>` of the classic event's
 * `data.object`. Requests share one rate limit. The worker calls it only for types its table handles.
 */
export function stripeFetcher(options: FetcherOptions): Fetcher {
  const limit = createRateLimit(options.requestsPerSecond ?? 20);
  const retry: StripeRetryOptions = { attempts: 4, baseMs: 250, maxMs: 4_000, ...options.retry };
  const call = <T>(request: () => Promise<T>): Promise<T> =>
    withStripeRetry(async () => {
      await limit();
      return request();
    }, retry);

  return {
    describeFailure: (err) => (options.apiBase ? describeStripeFailure(err, options.apiBase) : undefined),
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
          const event = (await call(() => notification.fetchEvent())) as Record<string, unknown>;
          return { kind: "apply", object: event, changeId: stored.id };
        }
        const related = stored.related_object;
        if (!related)
          return { kind: "missing", error: `Thin event ${stored.id} points to no object (no related_object): nothing to apply` };
        const object = await missingAsUndefined(() => call(() => notification.fetchRelatedObject()));
        if (object === undefined) return missing(related.type, related.id);
        return { kind: "apply", object: object as Record<string, unknown>, changeId: stored.snapshot_event ?? stored.id };
      }
      const current = (claim.payload.data as { object?: Record<string, unknown> } | undefined)?.object;
      const type = typeof current?.object === "string" ? current.object : undefined;
      const id = typeof current?.id === "string" ? current.id : undefined;
      const path = type === undefined ? undefined : RESOURCE_PATH[type];
      if (!current || !id || path === undefined || !/^[A-Za-z0-9_]{1,250}$/.test(id)) {
        throw new PermanentError(`Cannot refetch ${claim.eventId}: its data.object has no id or an object type without an API path`);
      }
      const object = await missingAsUndefined(() => call(() => options.stripe.rawRequest("GET", `/v1/${path}/${id}`) as Promise<unknown>));
      if (object === undefined) return missing(type ?? "object", id);
      return { kind: "apply", object: object as Record<string, unknown>, changeId: claim.eventId };
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
