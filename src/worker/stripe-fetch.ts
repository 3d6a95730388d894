import type Stripe from "stripe";
import type { Claim } from "./claim.ts";
import { describeStripeFailure } from "../stripe-api/describe-failure.ts";
import { withStripeRetry, type StripeRetryOptions } from "../stripe-api/retry.ts";
import { PermanentError } from "../errors.ts";
import { EVENT_GENERATION_RESOLVED, readHealthImpact, readThinNotification, thinTypeOf } from "../providers/stripe-thin.ts";
import { healthWindow, type HealthRead } from "../handlers/stripe-thin.ts";

/**
 * What a claimed row needs after the API was read:
 * - `apply`: run the row's handler on `object` (the object's current state, or for a health
 *   notification a {@link HealthRead}: the full event and the current state of the object it names),
 *   with `changeId` (the classic event of the change) for the change claim, and `note`, one line for
 *   the worker's log (a health notification: what was read and which window is backfilled, and why);
 * - `missing`: Stripe no longer has the object (404 `resource_missing`, or the notification points to
 *   none): the row is settled `object_missing`, never retried.
 */
export type Resolution =
  { kind: "apply"; object: Record<string, unknown>; changeId: string; note?: string } | { kind: "missing"; error: string };

/** Reads from Stripe what a claimed row needs ({@link stripeFetcher}). */
export interface Fetcher {
  /** True when the row must be read from the API before it is applied: every thin row, classic rows of refetch endpoints. */
  needsFetch(claim: Pick<Claim, "provider" | "endpoint">): boolean;
  /**
   * The rows {@link needsFetch} is true for, as the claim's SQL can select them: every row of
   * `providers`, and rows at `endpoints` (`provider/endpoint`). The worker claims at most one such row
   * per free slot (each is read and applied alone). Undefined: every row may need a read.
   */
  scope?: { providers: readonly string[]; endpoints: readonly string[] };
  /**
   * Reads what `claim` points to, rate limited, retrying 429/409/5xx/connection errors with backoff.
   * `handles` says which thin types the row's table applies (a health notification's object is read
   * only when one applies its impact's type; default: every type).
   * @throws the API error when tries run out (the caller defers the row without using an attempt), or
   *   PermanentError for a row no fetch can help (a classic event whose object has no id, a URL that is
   *   not a Stripe API path, a health event without its impact): nothing is read then.
   */
  resolve(claim: Claim & { payload: Record<string, unknown> }, handles?: (type: string) => boolean): Promise<Resolution>;
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
 * What a `related_object.url` must be before the worker reads it with our key: a path of Stripe's API
 * (`/v1/…` or `/v2/…`) of 1 to 8 segments of letters, digits and `_` (nested paths such as
 * `/v1/accounts/acct_…/persons/person_…` included), at most 1000 characters. No scheme, host, `//`,
 * `..`, `%`, query or fragment can pass, so a read never leaves `STRIPE_API_BASE`.
 */
const STRIPE_API_PATH = /^\/v[12](?:\/[A-Za-z0-9_]{1,250}){1,8}$/;

/**
 * Checks `url` (a `related_object.url`) against {@link STRIPE_API_PATH}, just before a read.
 * @throws PermanentError naming the event and why nothing was read (the row is parked as needs-review).
 */
export function stripeApiPath(url: string, eventId: string): string {
  if (url.length <= 1000 && STRIPE_API_PATH.test(url)) return url;
  const shown = JSON.stringify(url.length > 80 ? `${url.slice(0, 80)}…` : url);
  throw new PermanentError(
    `Refused to read related_object.url ${shown} of ${eventId}: not a Stripe API path (/v1/… or /v2/… of ids); nothing was fetched`,
  );
}

/** A connected account id as `Stripe-Account` takes it (Stripe docs "Making API calls for connected accounts"). */
const ACCOUNT_ID = /^acct_[A-Za-z0-9]{1,250}$/;

/**
 * A {@link Fetcher} over stripe-node. Thin rows: the stored notification is rebuilt with stripe-node's
 * `parseEventNotificationWithoutVerification` (it was verified on receipt); its `related_object.url`
 * is checked ({@link stripeApiPath}) and read (`GET`, for the notification's `context` account as
 * `Stripe-Account`). The health type: `fetchEvent()` (`GET /v2/core/events/<id>`), then, when the table
 * applies its `data.impact.event_type`, the impact's `related_object.url`, checked and read the same
 * way for the impact's `context` account (a 404 reads as null). Refetch rows: GET `/v1/<resource>/<id>` of the classic event's
 * `data.object`, as the row's account (`Stripe-Account`) when it has one. Requests share one rate limit. The worker calls it only for types its table handles.
 */
export function stripeFetcher(options: FetcherOptions): Fetcher {
  const limit = createRateLimit(options.requestsPerSecond ?? 20);
  const retry: StripeRetryOptions = { attempts: 4, baseMs: 250, maxMs: 4_000, ...options.retry };
  const call = <T>(request: () => Promise<T>): Promise<T> =>
    withStripeRetry(async () => {
      await limit();
      return request();
    }, retry);
  /** GET of a checked related_object.url for `account` (undefined: the platform); undefined on a 404. */
  const readRelated = (url: string, account: string | null | undefined, eventId: string) => {
    const path = stripeApiPath(url, eventId);
    if (account && !ACCOUNT_ID.test(account))
      throw new PermanentError(`Refused to read ${path} for ${eventId}: its context is not a connected account id acct_…`);
    const headers = { "Stripe-Request-Trigger": `event=${eventId}` };
    return missingAsUndefined(() =>
      call(
        () =>
          options.stripe.rawRequest("GET", path, undefined, {
            headers,
            ...(account ? { stripeAccount: account } : {}),
          }) as Promise<unknown>,
      ),
    );
  };

  return {
    describeFailure: (err) => (options.apiBase ? describeStripeFailure(err, options.apiBase) : undefined),
    needsFetch: (claim) =>
      claim.provider === "stripe-thin" || (claim.provider === "stripe" && options.refetchEndpoints.has(claim.endpoint)),
    scope: { providers: ["stripe-thin"], endpoints: [...options.refetchEndpoints].map((e) => `stripe/${e}`) },
    async resolve(claim, handles = () => true) {
      if (claim.provider === "stripe-thin") {
        const stored = readThinNotification(claim.payload);
        if (stored.type === EVENT_GENERATION_RESOLVED) {
          // Every notification type has fetchEvent.
          const notification = options.stripe.parseEventNotificationWithoutVerification(JSON.stringify(stored)) as unknown as {
            fetchEvent(): Promise<unknown>;
          };
          const event = (await call(() => notification.fetchEvent())) as Record<string, unknown>;
          return readHealth(event, stored.id, handles, readRelated);
        }
        const related = stored.related_object;
        if (!related)
          return { kind: "missing", error: `Thin event ${stored.id} points to no object (no related_object): nothing to apply` };
        const object = await readRelated(related.url, stored.context, stored.id);
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
      // A connected account's object is read as that account (header Stripe-Account; Stripe docs,
      // "Making API calls for connected accounts"); the platform's own without it.
      const as = claim.account ? { stripeAccount: claim.account } : undefined;
      const object = await missingAsUndefined(() =>
        call(() => options.stripe.rawRequest("GET", `/v1/${path}/${id}`, undefined, as) as Promise<unknown>),
      );
      if (object === undefined) return missing(type ?? "object", id);
      return { kind: "apply", object: object as Record<string, unknown>, changeId: claim.eventId };
    },
  };
}

/**
 * The resolution of a health notification from its full `event`: the object its impact names, read
 * when `handles` its thin type, as a {@link HealthRead}, with a note naming what was read and the
 * backfill window (healthWindow) and its basis.
 * @throws PermanentError when the event has no readable impact or window, or the impact's URL is not
 *   a Stripe API path; the read's own errors.
 */
async function readHealth(
  event: Record<string, unknown>,
  eventId: string,
  handles: (type: string) => boolean,
  readRelated: (url: string, account: string | undefined, eventId: string) => Promise<unknown>,
): Promise<Resolution> {
  const impact = readHealthImpact(event);
  const window = healthWindow(event);
  const { id, type, url } = impact.related_object;
  const about = `${type} ${id} (${impact.event_type}${impact.context ? `, account ${impact.context}` : ""})`;
  let current: Record<string, unknown> | null = null;
  let read: string;
  if (!handles(thinTypeOf(impact.event_type))) read = `no handler applies ${impact.event_type}: ${about} not read`;
  else {
    current = ((await readRelated(url, impact.context, eventId)) as Record<string, unknown> | undefined) ?? null;
    read = current ? `read ${about} to apply its current state` : `Stripe no longer has ${about} (404): nothing to apply`;
  }
  const note = `${read}; backfilling events created ${window.start.toISOString()}..${window.end.toISOString()} (${window.basis})`;
  const object: HealthRead = { event, current };
  return { kind: "apply", object: object as unknown as Record<string, unknown>, changeId: eventId, note };
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
