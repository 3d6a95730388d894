// Entry file: the naive receiver peer of `bun run bench`, a peer and not product code. What a careful
// first Bun receiver does with the seed's SQL: Stripe's constructEventAsync with SubtleCrypto, then
// async (seed §6) one inbox insert per request, or sync (seed §5.3) the seed's statements in one
// transaction, into the seed-shaped naive_inbox (naive-inbox.ts), created at start if missing.
// Env: DATABASE_URL, STRIPE_WEBHOOK_SECRET, PORT, PEER_MODE (sync | async), DB_POOL_MAX.
import postgres from "postgres";
import Stripe from "stripe";
import { applyInvoicePaid, NAIVE_INBOX_DDL } from "./naive-inbox.ts";

const env = process.env;
const sql = postgres(env.DATABASE_URL ?? "", { max: Number(env.DB_POOL_MAX ?? 10), onnotice: () => {} });
const stripe = new Stripe("sk_test_unused");
const crypto = Stripe.createSubtleCryptoProvider();
const secret = env.STRIPE_WEBHOOK_SECRET ?? "";
const sync = env.PEER_MODE === "sync";

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
