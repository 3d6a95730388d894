import { signDelivery, type DeliveryProvider } from "./provider-delivery.ts";
import { mulberry32, shuffleInPlace } from "./random.ts";

/** One event to deliver: a label (file name), the exact request body, and headers its sender sets besides the signature. */
export interface EventFile {
  name: string;
  body: string;
  /** From the fixture folder's headers.json (GitHub's event and delivery id, Shopify's topic and event id). */
  headers?: Record<string, string>;
}

/** Options for {@link deliver}. */
export interface DeliverOptions {
  /** Webhook URL, e.g. `http://127.0.0.1:3000/webhooks/stripe`. */
  url: string;
  /** Secret to sign with: Stripe's `whsec_…`, GitHub's or Shopify's secret, Paddle's secret key, Adyen's hex HMAC key. */
  secret: string;
  /** Whose sender to sign like (provider-delivery.ts `signDelivery`). Default `stripe`. */
  provider?: DeliveryProvider;
  /** Deliveries per event (≥ 1); copies of one event may be in flight at once. Default 1. */
  copies?: number;
  /** Deliveries in flight at once. Default 1. */
  concurrency?: number;
  /** Shuffle the deliveries (seeded). Default false: file order. */
  shuffle?: boolean;
  /** Seed for the shuffle and the backoff jitter. Default 1. */
  seed?: number;
  /** Attempts per delivery before it counts as failed, like Stripe's retries but bounded. Default 6. */
  attempts?: number;
  /** First retry delay, ms; doubles per attempt with jitter, capped at 5000 ms. Default 200. */
  retryBaseMs?: number;
  /**
   * Connection failures in a row (no HTTP answer from any delivery in between) after which the whole
   * run gives up: nothing listens, so waiting out every delivery's retries would only take minutes.
   * Default 3.
   */
  giveUpAfterConnectionFailures?: number;
  /** Longest one request may take before it counts as a connection failure, ms. Default 30000. */
  requestTimeoutMs?: number;
  /** Injected for tests; default global fetch. */
  fetch?: (request: Request) => Promise<Response>;
  /**
   * Stops the run when aborted (Ctrl-C): no new delivery or retry starts, requests in flight finish, and
   * the summary comes back with `gaveUp` ("interrupted") counting what was never sent.
   */
  signal?: AbortSignal;
}

/** What happened: deliveries by final outcome, plus retries and the statuses that caused them. */
export interface DeliverSummary {
  deliveries: number;
  /** HTTP requests made, including retries. */
  requests: number;
  /** Final outcome per delivery: processed, duplicate, ignored, queued, … or `failed`. */
  outcomes: Record<string, number>;
  /** Non-2xx statuses (or `network`) seen on any attempt. */
  retried: Record<string, number>;
  /** Deliveries that never got a 2xx, with the last status: `400 signature_mismatch`, `503`, `network`. */
  failures: { name: string; status: string }[];
  /**
   * Set when the run stopped early (connection failures in a row, or `signal` aborted): why, and how many
   * deliveries were never sent (not in `failures`, not in `outcomes`).
   */
  gaveUp?: { reason: string; notSent: number };
}

/** 4xx statuses a retry can fix (timeout, conflict, rate limit); any other 4xx is final. */
const RETRYABLE_4XX = new Set([408, 409, 429]);

/**
 * Posts each event's exact bytes the way Stripe does (Stripe docs, "Webhook signatures"): a fresh
 * `Stripe-Signature: t=…,v1=…` per attempt (or, with `provider`, signed as GitHub, Shopify, Paddle or
 * Adyen sign: provider-delivery.ts), `Content-Type: application/json; charset=utf-8`, and
 * retries a 5xx, 408, 409, 429 or connection failure with jittered exponential backoff. Unlike Stripe,
 * which retries every non-2xx, any other 4xx is final at once: this is our development tool, and a
 * bad signature or body does not get better by resending it. A status is reported with the answer's
 * `error` code when it has one (`400 signature_mismatch`). After `giveUpAfterConnectionFailures`
 * connection failures in a row, or once `signal` is aborted, the whole run stops (`gaveUp`). Never
 * re-serializes a body. Resolves when every delivery got a 2xx, failed, or was given up; never throws for
 * HTTP or network errors.
 */
export async function deliver(events: readonly EventFile[], options: DeliverOptions): Promise<DeliverSummary> {
  const random = mulberry32(options.seed ?? 1);
  const queue: EventFile[] = events.flatMap((e) => Array.from({ length: options.copies ?? 1 }, () => e));
  if (options.shuffle) shuffleInPlace(queue, random);
  const summary: DeliverSummary = { deliveries: queue.length, requests: 0, outcomes: {}, retried: {}, failures: [] };
  const send = options.fetch ?? ((request: Request) => fetch(request));
  const attempts = options.attempts ?? 6;
  const base = options.retryBaseMs ?? 200;
  const giveUpAfter = options.giveUpAfterConnectionFailures ?? 3;
  const timeoutMs = options.requestTimeoutMs ?? 30_000;
  let connectionFailuresInARow = 0;
  let gaveUp = false;
  let notSent = 0;
  const stopped = () => gaveUp || options.signal?.aborted === true;

  /** One request: the status to report, and whether to try again; undefined on a 2xx. */
  async function attemptOnce(event: EventFile): Promise<{ status: string; retry: boolean } | undefined> {
    summary.requests++;
    let response: Response;
    let text: string;
    try {
      const fixture = { name: event.name, body: event.body, headers: event.headers ?? {} };
      const signed = await signDelivery(options.provider ?? "stripe", fixture, options.secret, Math.floor(Date.now() / 1000));
      response = await send(
        new Request(options.url, {
          method: "POST",
          headers: { ...signed.headers, "content-type": "application/json; charset=utf-8", "user-agent": "webhook-inbox-deliver" },
          body: signed.body,
          signal: AbortSignal.timeout(timeoutMs),
        }),
      );
      text = await response.text();
    } catch {
      if (++connectionFailuresInARow >= giveUpAfter) gaveUp = true;
      return { status: "network", retry: true };
    }
    connectionFailuresInARow = 0;
    if (response.ok) {
      // Adyen's required answer is the text [accepted], not JSON.
      const outcome = parseField(text, "outcome") ?? (text === "[accepted]" ? "accepted" : "2xx");
      summary.outcomes[outcome] = (summary.outcomes[outcome] ?? 0) + 1;
      return undefined;
    }
    const code = parseField(text, "error");
    const retry = response.status >= 500 || RETRYABLE_4XX.has(response.status);
    return { status: code ? `${response.status} ${code}` : String(response.status), retry };
  }

  async function deliverOne(event: EventFile): Promise<void> {
    let last = "";
    for (let attempt = 1; attempt <= attempts && !stopped(); attempt++) {
      if (attempt > 1) await sleep(Math.min(base * 2 ** (attempt - 2), 5000) * (0.5 + random()));
      const failed = await attemptOnce(event);
      if (!failed) return;
      last = failed.status;
      if (!failed.retry) break;
      summary.retried[last] = (summary.retried[last] ?? 0) + 1;
    }
    if (last === "") {
      notSent++; // stopped before its first request
      return;
    }
    summary.outcomes.failed = (summary.outcomes.failed ?? 0) + 1;
    summary.failures.push({ name: event.name, status: last });
  }

  let next = 0;
  const runners = Array.from({ length: Math.max(1, options.concurrency ?? 1) }, async () => {
    while (next < queue.length && !stopped()) {
      const event = queue[next++];
      if (event) await deliverOne(event);
    }
  });
  await Promise.all(runners);
  if (stopped()) {
    summary.gaveUp = {
      reason: gaveUp
        ? `${giveUpAfter} connection failures in a row, no answer from ${printableUrl(options.url)} in between`
        : "interrupted",
      notSent: notSent + queue.length - next,
    };
  }
  return summary;
}

/**
 * `url` fit to print: user name and password (user-info) replaced by `***`, e.g.
 * `http://***@127.0.0.1:3000/webhooks/stripe`; a string that is no URL is not shown at all, as it may
 * hold a password too. WHATWG URL Standard, "URL serializing".
 */
export function printableUrl(url: string): string {
  if (!URL.canParse(url)) return "(the URL given, not shown: it cannot be parsed)";
  const parsed = new URL(url);
  if (parsed.username === "" && parsed.password === "") return parsed.href;
  parsed.username = "***";
  parsed.password = "";
  return parsed.href;
}

/** A string field of a JSON object body (`outcome` of a 2xx, `error` of a refusal), if there is one. */
function parseField(text: string, field: string): string | undefined {
  try {
    const value = (JSON.parse(text) as Record<string, unknown>)[field];
    return typeof value === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
