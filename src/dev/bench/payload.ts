/**
 * A ~1.5 KB Stripe `invoice.paid` event body for benchmarks (the pgbench ceilings use a payload of
 * that size). `run` and `n` make the event and invoice ids unique, so every delivery books
 * one payment. Pretty-printed like Stripe's bodies ("key": value), which also keeps pgbench from
 * reading `:word` as one of its variables when the same text is inlined in its script.
 */
export function benchEventBody(run: string, n: number | string, amount = 2000): string {
  const invoiceId = `in_bench_${run}_${n}`;
  const event = {
    id: `evt_bench_${run}_${n}`,
    object: "event",
    api_version: "2025-09-30.clover",
    created: 1764461520,
    livemode: false,
    pending_webhooks: 1,
    type: "invoice.paid",
    request: { id: null, idempotency_key: null },
    data: {
      object: {
        id: invoiceId,
        object: "invoice",
        customer: `cus_bench_${run}`,
        currency: "usd",
        status: "paid",
        amount_due: amount,
        amount_paid: amount,
        amount_remaining: 0,
        amount_shipping: 0,
        attempt_count: 1,
        attempted: true,
        billing_reason: "subscription_cycle",
        collection_method: "charge_automatically",
        account_country: "US",
        account_name: "Webhook Inbox Benchmarks",
        customer_email: null,
        customer_name: null,
        description: null,
        hosted_invoice_url: null,
        invoice_pdf: null,
        number: `BENCH-${n}`,
        period_start: 1764375120,
        period_end: 1764461520,
        subtotal: amount,
        total: amount,
        total_excluding_tax: amount,
        starting_balance: 0,
        ending_balance: 0,
        lines: {
          object: "list",
          has_more: false,
          total_count: 1,
          data: [
            {
              id: `il_bench_${run}_${n}`,
              object: "line_item",
              amount,
              currency: "usd",
              description: "1 seat x Team plan (at 20.00 per month)",
              period: { start: 1764375120, end: 1764461520 },
              quantity: 1,
              discountable: true,
              livemode: false,
              pricing: {
                type: "price_details",
                price_details: { price: "price_bench_team", product: "prod_bench_team" },
                unit_amount_decimal: "2000",
              },
            },
          ],
        },
        metadata: { plan: "team", seats: "1", region: "eu-west", source: "benchmark" },
        status_transitions: { finalized_at: 1764461400, paid_at: 1764461520, marked_uncollectible_at: null, voided_at: null },
      },
    },
  };
  return JSON.stringify(event, null, 1);
}
