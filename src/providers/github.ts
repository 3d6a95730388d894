import { AppError, PermanentError } from "../errors.ts";
import { anyHmacMatches, fromHex, hmacSha256, toHex } from "./hmac.ts";
import { isObject, jsonEvent, text } from "./json-event.ts";
import type { Subject, VerifiedEvent, VerifyInput, WebhookProvider } from "./provider.ts";

/**
 * Verifies a GitHub webhook delivery (GitHub docs, "Validating webhook deliveries" and "Webhook events
 * and payloads", delivery headers): `X-Hub-Signature-256: sha256=<64 hex>` must be the HMAC-SHA256 of
 * the exact body with one of the endpoint's secrets (the webhook's secret, any text); `X-GitHub-Event`
 * names the event and `X-GitHub-Delivery` (a GUID, kept on a redelivery) is the inbox event id. The
 * body must be a JSON object (the payload: GitHub has no envelope). The event type is `<X-GitHub-Event>`,
 * or `<X-GitHub-Event>.<action>` when the payload has a string `action` (`issues.opened`, `push`).
 * GitHub signs no timestamp: a captured delivery stays valid, and only its delivery id stops a replay
 * from being applied twice.
 * @throws AppError `signature_missing` | `signature_malformed` | `signature_mismatch` | `invalid_event`.
 */
export async function verifyGitHub(input: VerifyInput): Promise<VerifiedEvent> {
  const signature = input.headers.get("x-hub-signature-256");
  const event = input.headers.get("x-github-event");
  const delivery = input.headers.get("x-github-delivery");
  if (!signature || !event || !delivery)
    throw new AppError(
      "signature_missing",
      "Missing GitHub header: X-Hub-Signature-256, X-GitHub-Event and X-GitHub-Delivery are required",
    );
  const hex = /^sha256=([0-9a-f]{64})$/.exec(signature)?.[1];
  if (!hex) throw new AppError("signature_malformed", "Cannot parse X-Hub-Signature-256: expected sha256= and 64 lowercase hex digits");
  if (!/^[a-z_]{1,100}$/.test(event))
    throw new AppError("signature_malformed", "Cannot parse X-GitHub-Event: expected an event name (a–z, _)");
  if (!/^[\x21-\x7e]{1,255}$/.test(delivery))
    throw new AppError("signature_malformed", "Cannot parse X-GitHub-Delivery: expected 1 to 255 printable ASCII characters");
  if (!(await anyHmacMatches(input.secrets, input.body, [fromHex(hex) as Uint8Array])))
    throw new AppError("signature_mismatch", "Cannot verify GitHub signature: X-Hub-Signature-256 does not match");
  return jsonEvent(input.body, "a GitHub webhook payload: a JSON object", (payload) => {
    const action = payload.action;
    if (action !== undefined && !(typeof action === "string" && /^[a-z0-9_]{1,100}$/.test(action))) return undefined;
    return { id: delivery, type: action === undefined ? event : `${event}.${action}`, subject: gitHubSubject(payload) };
  });
}

/**
 * The subject of a GitHub payload: the payload itself (GitHub sends the object, not an envelope), keyed
 * by `repository.full_name`, else `organization.login`, else none (the worker orders by delivery id).
 * Never throws for an object: every GitHub payload is its own subject.
 */
export function gitHubSubject(payload: Record<string, unknown>): Subject {
  const repository = isObject(payload.repository) ? text(payload.repository.full_name) : undefined;
  const organization = isObject(payload.organization) ? text(payload.organization.login) : undefined;
  return { object: payload, key: repository ?? organization };
}

/**
 * The `X-Hub-Signature-256` value GitHub sends for `body` signed with `secret`: `sha256=` and the
 * lowercase hex HMAC-SHA256 of the exact body (GitHub docs, "Validating webhook deliveries").
 */
export async function signGitHubPayload(body: string, secret: string): Promise<string> {
  return `sha256=${toHex(await hmacSha256(secret, body))}`;
}

/** The GitHub provider: inbox `provider = 'github'`, URL `/webhooks/github/<endpoint>`. */
export const gitHubProvider: WebhookProvider = {
  name: "github",
  // GitHub redelivers a delivery of the past 3 days, by hand or through the API (GitHub docs,
  // "Redelivering webhooks"); it never retries by itself.
  resendWindowMs: 3 * 86_400_000,
  verify: verifyGitHub,
  subject: (payload) => {
    if (!isObject(payload)) throw new PermanentError("Cannot read GitHub event: its payload is not an object");
    return gitHubSubject(payload);
  },
};
