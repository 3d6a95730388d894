/** Why a connection failed, by the system error code stripe-node's fetch client carries in `detail.code`. */
const CONNECT_FAILURES: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused",
  ENOTFOUND: "host not found",
  EAI_AGAIN: "host name lookup failed",
  ECONNRESET: "connection reset",
  ETIMEDOUT: "connection timed out",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  ConnectionRefused: "connection refused",
  FailedToOpenSocket: "could not open a socket",
};

/** `host:port` of `apiBase`, the port spelled out (443 for https, 80 for http when the URL leaves it out). */
function stripeApiHost(apiBase: URL): string {
  return `${apiBase.hostname}:${apiBase.port || (apiBase.protocol === "http:" ? "80" : "443")}`;
}

/**
 * One line for an operator about a failed call to the Stripe API at `apiBase` (`STRIPE_API_BASE`), or
 * undefined when `err` is not a stripe-node error (a database error, a bug: the caller says those):
 * - no connection (stripe-node's `StripeConnectionError`): "Cannot connect to the Stripe API at
 *   <host>:<port> (STRIPE_API_BASE): connection refused (ECONNREFUSED)", the reason read from the
 *   system error code; no answer within stripe-node's timeout: "No answer from the Stripe API at
 *   <host>:<port> (STRIPE_API_BASE) within 30000 ms";
 * - an HTTP answer: "Stripe API at <host>:<port> answered HTTP <status> (<code>): <Stripe's message,
 *   at most 200 characters>"; for 401 and 403 what they mean instead of the message (Stripe's quotes
 *   the key, masked but for its last characters).
 * Never contains the API key (it is not in `apiBase`, and stripe-node sends it in a header only).
 */
export function describeStripeFailure(err: unknown, apiBase: URL): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const e = err as { type?: unknown; statusCode?: unknown; code?: unknown; message?: unknown; detail?: { code?: unknown } };
  if (typeof e.type !== "string" || !e.type.startsWith("Stripe")) return undefined;
  const host = stripeApiHost(apiBase);
  const message = typeof e.message === "string" ? e.message : "";
  if (e.type === "StripeConnectionError") {
    // stripe-node's timeout: "Request aborted due to timeout being reached (30000ms)".
    const timeoutMs = /timeout/i.test(message) ? (/\((\d+)ms\)/.exec(message)?.[1] ?? "?") : undefined;
    if (timeoutMs !== undefined) return `No answer from the Stripe API at ${host} (STRIPE_API_BASE) within ${timeoutMs} ms`;
    const code = typeof e.detail?.code === "string" ? e.detail.code : undefined;
    const why = code === undefined ? "the connection failed" : `${CONNECT_FAILURES[code] ?? "the connection failed"} (${code})`;
    return `Cannot connect to the Stripe API at ${host} (STRIPE_API_BASE): ${why}`;
  }
  const status = typeof e.statusCode === "number" ? `HTTP ${e.statusCode}` : "an error without an HTTP status";
  const code = typeof e.code === "string" ? ` (${e.code})` : "";
  // Stripe's 401 and 403 messages quote the key, masked but for its last characters: say what they mean instead.
  const said =
    e.statusCode === 401
      ? ": STRIPE_API_KEY is wrong, revoked or of another account"
      : e.statusCode === 403
        ? ": STRIPE_API_KEY lacks a permission this command needs"
        : message === ""
          ? ""
          : `: ${message.slice(0, 200)}`;
  return `Stripe API at ${host} answered ${status}${code}${said}`;
}
