// The end state of the fixture lifecycle (test/fixtures/stripe/invoice-lifecycle), whatever the order
// and however many copies: two paid invoices with one payment each, one void invoice, two outbox rows.
import { expect } from "bun:test";
import type { Db } from "../../src/db/db.ts";

/** Asserts the lifecycle's invoices, ledger and outbox rows in `db`. */
export async function expectLifecycleRows(db: Db): Promise<void> {
  const invoices = await db`
    select id, status, amount_paid::int as amount_paid
      from invoices
     order by id
  `;
  expect([...invoices]).toEqual([
    { id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", status: "paid", amount_paid: 2000 },
    { id: "in_1SkA2qLgUG5tbmjcR8oC3wYb", status: "void", amount_paid: 0 },
    { id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", status: "paid", amount_paid: 129900 },
  ]);
  const ledger = await db`
    select invoice_id, kind, amount::int as amount
      from ledger_entries
     order by invoice_id
  `;
  expect([...ledger]).toEqual([
    { invoice_id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", kind: "payment", amount: 2000 },
    { invoice_id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", kind: "payment", amount: 129900 },
  ]);
  const outbox = await db`
    select aggregate_id, event_type
      from outbox
     order by aggregate_id
  `;
  expect([...outbox]).toEqual([
    { aggregate_id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", event_type: "InvoicePaymentBooked" },
    { aggregate_id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", event_type: "InvoicePaymentBooked" },
  ]);
}
