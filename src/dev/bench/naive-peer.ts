// Entry file: the naive receiver peer of `bun run bench`, a peer and not product code. What a careful
// first Bun receiver does with the seed's SQL: Stripe's constructEventAsync with SubtleCrypto, then
// async (seed §6) one inbox insert per request, or sync (seed §5.3) the seed's statements in one
// transaction, into the seed-shaped naive_inbox (naive-inbox.ts), created at start if missing.
// Env: DATABASE_URL, STRIPE_WEBHOOK_SECRET, PORT, PEER_MODE (sync | async), DB_POOL_MAX.
import postgres from "postgres";
import Stripe from "stripe";
import { NAIVE_INBOX_DDL } from "./naive-inbox.ts";

const env = process.env;
const sql = postgres(env.DATABASE_URL ?? "", { max: Number(env.DB_POOL_MAX ?? 10), onnotice: () => {} });
const stripe = new Stripe("sk_test_unused");
const crypto = Stripe.createSubtleCryptoProvider();
const secret = env.STRIPE_WEBHOOK_SECRET ?? "";
const sync = env.PEER_MODE === "sync";

/** The seed's `_apply_invoice_paid`: upsert, read the status, book the payment once, then its outbox row. */
async function applyInvoicePaid(tx: postgres.TransactionSql, inv: Record<string, unknown>): Promise<void> {
  const { id, customer, currency, amount_paid: amount } = inv as { id: string; customer: string; currency: string; amount_paid: number };
  await tx`
    insert into invoices (id, customer_id, status, currency, amount_paid, paid_at)
    values (${id}, ${customer}, 'paid', ${currency}, ${amount}, now())
    on conflict (account, id) do update
       set status = 'paid', amount_paid = excluded.amount_paid, paid_at = coalesce(invoices.paid_at, excluded.paid_at), updated_at = now()
     where invoices.status not in ('paid', 'void')
  `;
  const [row] = await tx`select status from invoices where id = ${id}`;
  if (row?.status !== "paid") return;
  const booked = await tx`
    insert into ledger_entries (invoice_id, kind, amount, currency, event_id)
    values (${id}, 'payment', ${amount}, ${currency}, ${inv.event_id as string})
    on conflict (account, invoice_id, kind) do nothing
    returning id
  `;
  if (booked.length === 0) return;
  await tx`
    insert into naive_outbox (aggregate_type, aggregate_id, event_type, payload)
    values ('Invoice', ${id}, 'InvoicePaymentBooked', ${sql.json({ invoice_id: id, amount })})
  `;
}

const insertInbox = (q: postgres.Sql | postgres.TransactionSql, event: Stripe.Event) => q`
  insert into naive_inbox (provider, endpoint, event_id, event_type, payload)
  values ('stripe', 'naive-peer', ${event.id}, ${event.type}, ${sql.json(event as unknown as postgres.JSONValue)})
  on conflict (provider, endpoint, event_id) do nothing
  returning event_id
`;

await sql.unsafe(NAIVE_INBOX_DDL);

const server = Bun.serve({
  port: Number(env.PORT ?? 0),
  hostname: "127.0.0.1",
  async fetch(request) {
    if (request.method !== "POST") return new Response("ok");
    const body = await request.text();
    let event: Stripe.Event;
    try {
      event = await stripe.webhooks.constructEventAsync(body, request.headers.get("stripe-signature") ?? "", secret, undefined, crypto);
    } catch {
      return new Response("bad signature", { status: 400 });
    }
    try {
      if (!sync) return Response.json({ outcome: (await insertInbox(sql, event)).length ? "queued" : "duplicate" });
      const outcome = await sql.begin(async (tx) => {
        if ((await insertInbox(tx, event)).length === 0) return "duplicate";
        const object = event.data.object as unknown as Record<string, unknown>;
        if (event.type === "invoice.paid") await applyInvoicePaid(tx, { ...object, event_id: event.id });
        await tx`update naive_inbox set processed_at = now() where provider = 'stripe' and endpoint = 'naive-peer' and event_id = ${event.id}`;
        return "processed";
      });
      return Response.json({ outcome });
    } catch {
      return new Response("error", { status: 500 });
    }
  },
});
console.log(`naive peer listening on ${server.port}`);
