/**
 * A Stripe event body for `type` with `object` as `data.object`, pretty-printed as Stripe sends it
 * (Stripe API reference, "The Event object"); `created` is fixed (Unix seconds), so bodies are
 * reproducible. For the tools and the tests, never the product.
 */
export function stripeEventBody(id: string, type: string, object: Record<string, unknown>): string {
  return JSON.stringify(
    {
      id,
      object: "event",
      api_version: "2025-09-30.clover",
      created: 1764461520,
      livemode: false,
      pending_webhooks: 1,
      type,
      data: { object },
    },
    null,
    2,
  );
}
