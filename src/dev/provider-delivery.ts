// How each provider's sender signs a delivery, for the delivery tool and the tests: one place that
// turns a fixture (its exact body and the headers its folder's headers.json gives it) into the request
// the provider would send. Development tooling: never imported by the product.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { signAdyenItem } from "../providers/adyen.ts";
import { signGitHubPayload } from "../providers/github.ts";
import { signPaddlePayload } from "../providers/paddle.ts";
import { signShopifyPayload } from "../providers/shopify.ts";
import { signStripePayload } from "../providers/stripe.ts";

/** The providers `bun run deliver --provider` signs for. */
export const DELIVERY_PROVIDERS = ["stripe", "github", "shopify", "paddle", "adyen"] as const;
export type DeliveryProvider = (typeof DELIVERY_PROVIDERS)[number];

/**
 * One fixture delivery: a label, the exact body, and the headers its sender sets besides the
 * signature (GitHub's event and delivery id, Shopify's topic and event id), from the `headers.json`
 * next to it (file name → headers).
 */
export interface ProviderFixture {
  name: string;
  body: string;
  headers: Record<string, string>;
}

/**
 * Every `.json` fixture of the given files and folders (a folder's files in name order; `headers.json`
 * is read as the headers of its neighbours, never sent).
 * @throws Error when a path does not exist or `headers.json` is not an object of header objects.
 */
export function readProviderFixtures(paths: readonly string[]): ProviderFixture[] {
  return paths.flatMap((path) => {
    if (!existsSync(path)) throw new Error(`No such file or folder: ${path}`);
    const files = statSync(path).isDirectory()
      ? readdirSync(path)
          .filter((f) => f.endsWith(".json") && f !== "headers.json")
          .sort()
          .map((f) => join(path, f))
      : [path];
    return files.map((file) => ({ name: basename(file), body: readFileSync(file, "utf8"), headers: headersOf(file) }));
  });
}

function headersOf(file: string): Record<string, string> {
  const manifest = join(dirname(file), "headers.json");
  if (!existsSync(manifest)) return {};
  const all = JSON.parse(readFileSync(manifest, "utf8")) as Record<string, Record<string, string>>;
  const headers = all[basename(file)] ?? {};
  if (typeof headers !== "object" || Object.values(headers).some((v) => typeof v !== "string"))
    throw new Error(`${manifest}: the entry of ${basename(file)} must be an object of header strings`);
  return headers;
}

/**
 * The request `provider` would send for `fixture`, signed with `secret` at `nowSec` (unix seconds):
 * Stripe `Stripe-Signature`; GitHub `X-Hub-Signature-256` (the fixture's headers give `X-GitHub-Event`
 * and `X-GitHub-Delivery`); Shopify `X-Shopify-Hmac-Sha256` and a fresh `X-Shopify-Webhook-Id` per
 * attempt, as Shopify sends (the fixture's give topic and event id); Paddle `Paddle-Signature`; Adyen
 * every item's `additionalData.hmacSignature` set in the body (re-serialized, 2-space indent; `secret`
 * is the hex HMAC key). `Content-Type: application/json`.
 * @throws Error when an Adyen fixture is not a notification or the key not hex.
 */
export async function signDelivery(
  provider: DeliveryProvider,
  fixture: ProviderFixture,
  secret: string,
  nowSec: number,
): Promise<{ headers: Record<string, string>; body: string }> {
  const headers: Record<string, string> = { "content-type": "application/json", ...fixture.headers };
  const body = fixture.body;
  switch (provider) {
    case "stripe":
      return { headers: { ...headers, "stripe-signature": await signStripePayload(body, secret, nowSec) }, body };
    case "github":
      return { headers: { ...headers, "x-hub-signature-256": await signGitHubPayload(body, secret) }, body };
    case "shopify":
      return {
        headers: {
          ...headers,
          "x-shopify-hmac-sha256": await signShopifyPayload(body, secret),
          "x-shopify-webhook-id": crypto.randomUUID(),
        },
        body,
      };
    case "paddle":
      return { headers: { ...headers, "paddle-signature": await signPaddlePayload(body, secret, nowSec) }, body };
    case "adyen": {
      const batch = JSON.parse(body) as { notificationItems?: { NotificationRequestItem?: Record<string, unknown> }[] };
      if (!Array.isArray(batch.notificationItems)) throw new Error(`${fixture.name} is not an Adyen notification (no notificationItems)`);
      for (const entry of batch.notificationItems) {
        if (entry.NotificationRequestItem) entry.NotificationRequestItem = await signAdyenItem(entry.NotificationRequestItem, secret);
      }
      return { headers, body: JSON.stringify(batch, null, 2) };
    }
  }
}
