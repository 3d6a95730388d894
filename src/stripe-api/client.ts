import Stripe from "stripe";
import { ConfigError } from "../config.ts";
import { describeError } from "../errors.ts";
import { describeStripeFailure } from "./describe-failure.ts";

/**
 * Where and how the Stripe API is called by the commands that read it (backfill, reconciliation,
 * thin-event fetches). Follows Stripe's API reference "Authentication" (a secret or restricted key
 * sent as a Bearer token) and stripe-node's `host`/`port`/`protocol` client options.
 */
export interface StripeApiSettings {
  /** `STRIPE_API_KEY`: `sk_…` or `rk_…` (a restricted key with read access is enough). Never logged. */
  apiKey: string;
  /** `STRIPE_API_BASE`, default `https://api.stripe.com`: a Stripe-compatible API (tests: the local fake). */
  apiBase: URL;
}

/** Default of `STRIPE_API_BASE`. */
export const DEFAULT_STRIPE_API_BASE = "https://api.stripe.com";

const API_KEY = /^(sk|rk)_(test|live)_[A-Za-z0-9]{8,}$/;

/**
 * Reads `STRIPE_API_KEY` and `STRIPE_API_BASE` from an environment map. The key must look like a
 * Stripe secret (`sk_test_…`, `sk_live_…`) or restricted (`rk_…`) key; the base must be an http(s)
 * URL without path, query, fragment or user-info (stripe-node only takes host, port and protocol).
 * Messages never quote the key.
 * @throws ConfigError listing every problem.
 */
export function readStripeApiSettings(env: Record<string, string | undefined>): StripeApiSettings {
  const problems: string[] = [];
  const apiKey = (env.STRIPE_API_KEY ?? "").trim();
  if (apiKey === "")
    problems.push("STRIPE_API_KEY is required for this command (a restricted key with read access to the objects it reads is enough)");
  else if (!API_KEY.test(apiKey)) problems.push("STRIPE_API_KEY is not a Stripe secret (sk_test_…/sk_live_…) or restricted (rk_…) key");
  const rawBase = env.STRIPE_API_BASE || DEFAULT_STRIPE_API_BASE;
  let apiBase: URL | undefined;
  try {
    apiBase = new URL(rawBase);
  } catch {
    problems.push(`STRIPE_API_BASE must be an absolute http(s) URL, got "${rawBase}"`);
  }
  if (apiBase) {
    if (apiBase.protocol !== "https:" && apiBase.protocol !== "http:")
      problems.push(`STRIPE_API_BASE must use http or https, got "${apiBase.protocol}"`);
    if (apiBase.username || apiBase.password) problems.push("STRIPE_API_BASE must not carry user-info (the key goes in STRIPE_API_KEY)");
    if ((apiBase.pathname !== "/" && apiBase.pathname !== "") || apiBase.search || apiBase.hash)
      problems.push(`STRIPE_API_BASE must be scheme://host[:port] only (stripe-node takes no path), got "${rawBase}"`);
  }
  if (problems.length > 0 || !apiBase) throw new ConfigError(problems);
  return { apiKey, apiBase };
}

/**
 * A stripe-node client pointed at `settings.apiBase`, using the Web `fetch` HTTP client (works on Bun,
 * Deno, Node and workerd). stripe-node's own retries are off (`maxNetworkRetries: 0`): callers retry
 * with {@link withStripeRetry} so the count and the backoff are theirs, and 429s (which stripe-node
 * does not retry) are retried too. `timeoutMs` bounds each request (default 30000 ms).
 */
export function stripeApiClient(settings: StripeApiSettings, timeoutMs = 30_000): Stripe {
  const base = settings.apiBase;
  const protocol = base.protocol === "http:" ? "http" : "https";
  return new Stripe(settings.apiKey, {
    host: base.hostname,
    port: base.port === "" ? (protocol === "http" ? 80 : 443) : Number(base.port),
    protocol,
    httpClient: Stripe.createFetchHttpClient(),
    maxNetworkRetries: 0,
    timeout: timeoutMs,
    appInfo: { name: "webhook-inbox" },
  });
}

/** What {@link checkStripeApiKey} found: `fatal` problems stop the command; the others are reported and it starts. */
export interface StripeApiProblem {
  fatal: boolean;
  /** One line for an operator, naming STRIPE_API_BASE's host:port; never the key. */
  message: string;
}

/**
 * Tries the API key once with the cheapest read (`GET /v1/events?limit=1`, Stripe API reference "List
 * all events") against `apiBase` (the client's `STRIPE_API_BASE`, for the message). Returns undefined
 * when it answers; a fatal problem when Stripe refuses the key (401: wrong, revoked, or for another
 * account); a non-fatal one, to report at start, when the API cannot be reached or answers 429/5xx
 * (describeStripeFailure: "Cannot connect to the Stripe API at <host>:<port> …"): not the key's fault,
 * so the commands start and their own reads retry. A 403 (a restricted key without Events read, which
 * thin and refetch reads do not need) is not reported. Never quotes the key.
 */
export async function checkStripeApiKey(stripe: Stripe, apiBase: URL): Promise<StripeApiProblem | undefined> {
  try {
    await stripe.events.list({ limit: 1 });
    return undefined;
  } catch (err) {
    const status = (err as { statusCode?: unknown } | null)?.statusCode;
    if (status === 401)
      return {
        fatal: true,
        message:
          "Stripe refused STRIPE_API_KEY (401 Unauthorized): it is wrong, revoked or of another account; set a valid sk_… or rk_… key",
      };
    if (status === 403) return undefined;
    return { fatal: false, message: describeStripeFailure(err, apiBase) ?? `Cannot read the Stripe API: ${describeError(err)}` };
  }
}
