// The files `webhook-inbox init` writes into an app: a configuration, one handler, its migration, a
// real-shaped Stripe event and a contract test. Text only; writing them is the edge's (bin/init.ts).

/** One file of the scaffold: its path relative to the app's folder and its text. */
export interface ScaffoldFile {
  path: string;
  text: string;
}

const CONFIG = `// webhook-inbox's configuration for this app (docs: node_modules/webhook-inbox/docs/app.md).
// Secrets (STRIPE_WEBHOOK_SECRET, DATABASE_URL, STRIPE_API_KEY) come from the environment, never from here.
import { defineConfig } from "webhook-inbox";
import { customerHandlers } from "./handlers/customers.ts";

export default defineConfig({
  // Added to the shipped Stripe handlers (invoices, ledger, refunds, disputes); replaceHandlers: true runs only these.
  handlers: { stripe: customerHandlers },
  // NNNN_name.sql, applied after webhook-inbox's own migrations and recorded apart (app_schema_migrations).
  migrations: "migrations",
  // Settings by environment variable name; the environment wins. INBOX_MODE: sync, async or hybrid.
  settings: { INBOX_MODE: "sync" },
});
`;

const HANDLER = `import { handlerTable } from "webhook-inbox";

/**
 * Stripe's customer.created: one row per (account, customer id) in customers (migrations/0001_customers.sql).
 * It runs inside the transaction that records the event in the inbox, so the row and "processed" commit
 * together; "on conflict do nothing" keeps it idempotent when the same customer arrives as another event.
 * account is "" for the platform's own events and acct_… for a Connect endpoint's connected accounts.
 */
export const customerHandlers = handlerTable({
  "customer.created": async (tx, customer, { account, eventId }) => {
    await tx\`
      insert into customers (account, id, email, name, created_at, event_id)
      values (\${account}, \${String(customer.id)}, \${(customer.email as string | null) ?? null},
              \${(customer.name as string | null) ?? null}, to_timestamp(\${Number(customer.created)}), \${eventId})
      on conflict (account, id) do nothing
    \`;
  },
});
`;

const MIGRATION = `-- The app's customers, one row per Stripe customer (handlers/customers.ts). Keyed by account and id:
-- a connected account's customer ids are its own (Stripe docs, "Connect webhooks").
create table customers (
  account    text        not null default '',
  id         text        not null,
  email      text,
  name       text,
  created_at timestamptz not null,
  event_id   text        not null,
  primary key (account, id)
);
`;

const FIXTURE = `{
  "id": "evt_1SlC4dLgUG5tbmjcCu5tCrtd",
  "object": "event",
  "api_version": "2025-09-30.clover",
  "created": 1764549000,
  "data": {
    "object": {
      "id": "cus_TiC4WQ3xFz9aLm",
      "object": "customer",
      "address": null,
      "balance": 0,
      "created": 1764548999,
      "currency": null,
      "default_source": null,
      "delinquent": false,
      "description": null,
      "discount": null,
      "email": "ada@example.com",
      "invoice_prefix": "7F3C2A1B",
      "invoice_settings": { "custom_fields": null, "default_payment_method": null, "footer": null, "rendering_options": null },
      "livemode": false,
      "metadata": {},
      "name": "Ada Lovelace",
      "next_invoice_sequence": 1,
      "phone": null,
      "preferred_locales": [],
      "shipping": null,
      "tax_exempt": "none",
      "test_clock": null
    }
  },
  "livemode": false,
  "pending_webhooks": 1,
  "request": { "id": "req_9hT2kQm4Xc", "idempotency_key": "5b0f3a9e-2c41-4d7e-9a8b-6f1e2d3c4b5a" },
  "type": "customer.created"
}
`;

const CONTRACT_TEST = `// The package's contract suite against this app's configuration: every fixture delivered shuffled with
// duplicates in sync, async and hybrid mode to a throwaway PostgreSQL (embedded, or DATABASE_URL's server),
// then the same end state checked in each.
import { contractSuite, expect } from "webhook-inbox/testing";

contractSuite({
  config: new URL("../webhook-inbox.config.ts", import.meta.url),
  fixtures: [new URL("../fixtures/customer.created.json", import.meta.url)],
  async check(db) {
    expect(await db\`select account, id, email, name from customers\`).toEqual([
      { account: "", id: "cus_TiC4WQ3xFz9aLm", email: "ada@example.com", name: "Ada Lovelace" },
    ]);
  },
});
`;

const GITIGNORE = `node_modules/
.data/
`;

/** The files `webhook-inbox init` writes, in the order it writes them. */
export function appScaffold(): ScaffoldFile[] {
  return [
    { path: "webhook-inbox.config.ts", text: CONFIG },
    { path: "handlers/customers.ts", text: HANDLER },
    { path: "migrations/0001_customers.sql", text: MIGRATION },
    { path: "fixtures/customer.created.json", text: FIXTURE },
    { path: "test/contract.test.ts", text: CONTRACT_TEST },
  ];
}

/** `.gitignore` lines the scaffold needs (the embedded database and the dev secret live in .data/). */
export const SCAFFOLD_GITIGNORE = GITIGNORE;

/** package.json scripts the scaffold adds where the app has none of that name. */
export const SCAFFOLD_SCRIPTS: Readonly<Record<string, string>> = {
  serve: "webhook-inbox serve",
  worker: "webhook-inbox worker",
  migrate: "webhook-inbox migrate",
  deliver: "webhook-inbox deliver",
  test: "bun test",
};
