import { Webhook } from "standardwebhooks";
import type { OutboxMessage } from "./claim.ts";
import type { SendFn } from "./deliver-claimed.ts";

/** Settings of {@link httpSink}. */
export interface HttpSinkOptions {
  /** Receiver URL (http or https). */
  url: string;
  /** Standard Webhooks signing secret: `whsec_` followed by base64 of the key bytes. */
  secret: string;
  /** Clock for `webhook-timestamp` (tests). Default `Date.now`. */
  now?: () => number;
  /** fetch implementation (tests). Default the global fetch. */
  fetch?: typeof fetch;
}

/** The sink answered something other than a 2xx. The status is kept; the response body is not. */
export class SinkRejectedError extends Error {
  constructor(readonly status: number) {
    super(`Sink answered HTTP ${status}`);
    this.name = "SinkRejectedError";
  }
}

/**
 * The JSON body of a delivery, in the Standard Webhooks payload shape (`type`, `timestamp`, `data`):
 * `data` is the outbox row's payload as written by the business transaction, `timestamp` the row's
 * `created_at` (ISO 8601), so every retry of one message carries the same bytes.
 */
export function webhookBody(message: OutboxMessage): string {
  return JSON.stringify({ type: message.eventType, timestamp: message.createdAt.toISOString(), data: message.payload });
}

/**
 * A {@link SendFn} that POSTs each message signed with the Standard Webhooks scheme (the
 * `standardwebhooks` package: HMAC-SHA256 over `<id>.<timestamp>.<body>`, pure JS on Web APIs):
 * headers `webhook-id` (the message's stable id, derived from its business change: {@link OutboxMessage.messageId}),
 * `webhook-timestamp` (seconds, the send time, for its tolerance check) and `webhook-signature`
 * (`v1,<base64>`), and `traceparent` (W3C Trace Context) when the message carries one. A 2xx is delivered; any other status (redirects are not followed) throws
 * {@link SinkRejectedError}; a network error or the dispatcher's timeout (its `signal`) throws too.
 * @throws Error at once when `secret` is not a usable `whsec_…` secret or `url` is not http(s).
 */
export function httpSink(options: HttpSinkOptions): SendFn {
  const url = URL.canParse(options.url) ? new URL(options.url) : undefined;
  if (!url) throw new Error("Cannot use sink URL: it is not an absolute URL");
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new Error(`Cannot use sink URL: protocol must be http or https, got ${url.protocol}`);
  const signer = signerFor(options.secret);
  const now = options.now ?? Date.now;
  const doFetch = options.fetch ?? fetch;
  return async (message, { signal }) => {
    const body = webhookBody(message);
    const timestamp = new Date(now());
    const response = await doFetch(url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "webhook-id": message.messageId,
        "webhook-timestamp": String(Math.floor(timestamp.getTime() / 1000)),
        "webhook-signature": signer.sign(message.messageId, timestamp, body),
        ...(message.traceparent ? { traceparent: message.traceparent } : {}),
      },
      body,
      redirect: "manual",
      signal,
    });
    await response.body?.cancel(); // the answer's body is neither needed nor logged
    if (response.status < 200 || response.status > 299) throw new SinkRejectedError(response.status);
  };
}

/** A Standard Webhooks signer, checking the secret's form without ever echoing it. */
function signerFor(secret: string): Webhook {
  if (!secret.startsWith("whsec_")) throw new Error("Cannot use the sink secret: it must start with whsec_ (Standard Webhooks form)");
  try {
    return new Webhook(secret);
  } catch {
    throw new Error("Cannot use the sink secret: the part after whsec_ is not non-empty base64");
  }
}
