// How backfill reads Stripe's Events API: one list call at a time, each retried on 429/5xx.
import type Stripe from "stripe";
import { withStripeRetry, type StripeRetryOptions } from "../stripe-api/retry.ts";

/** Filters every list call of a run carries (Stripe API reference, "List all events"). */
export interface EventFilters {
  /** `types`: at most 20 event types (Stripe's limit). */
  types?: readonly string[];
  /** `delivery_success=false`: events not yet delivered to every endpoint ("process undelivered events"). */
  undelivered?: boolean;
}

/** One page as Stripe returns it: newest first. */
export interface EventPage {
  data: Record<string, unknown>[];
  hasMore: boolean;
}

/** Parameters of one list call besides the filters: `ending_before` / `starting_after` cursors, `created` bounds (Unix seconds). */
export interface ListCall {
  limit: number;
  endingBefore?: string;
  startingAfter?: string;
  created?: number | { gte?: number; lt?: number };
  /** Leave the run's filters out (to find an anchor event of any type). */
  unfiltered?: boolean;
  /** The connected account (`acct_…`) whose events to list, sent as `Stripe-Account`; `""`/undefined: the platform's own. */
  account?: string;
}

/** Lists one page of events. */
export type ListEvents = (call: ListCall) => Promise<EventPage>;

/**
 * A {@link ListEvents} over `stripe.events.list`, each call retried with {@link withStripeRetry} on
 * 429, 409, 5xx and connection errors, made for `call.account` when set (`retry` sets the backoff; `onRetry` is told each wait).
 * @throws the stripe-node error of a final failure (a 4xx other than 409/429, or retries used up).
 */
export function stripeEventLister(stripe: Stripe, filters: EventFilters, retry: StripeRetryOptions = {}): ListEvents {
  return async (call) => {
    const params: Stripe.EventListParams = { limit: call.limit };
    if (call.endingBefore !== undefined) params.ending_before = call.endingBefore;
    if (call.startingAfter !== undefined) params.starting_after = call.startingAfter;
    if (call.created !== undefined) params.created = call.created;
    if (!call.unfiltered && filters.types?.length) params.types = [...filters.types];
    if (!call.unfiltered && filters.undelivered) params.delivery_success = false;
    // A connected account's events are listed as that account (stripe-node's `stripeAccount`, header
    // `Stripe-Account`: Stripe docs, "Making API calls for connected accounts").
    const as = call.account ? { stripeAccount: call.account } : undefined;
    const page = await withStripeRetry(() => stripe.events.list(params, as), retry);
    return { data: page.data as unknown as Record<string, unknown>[], hasMore: page.has_more };
  };
}
