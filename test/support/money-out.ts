import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Db } from "../../src/db/db.ts";

export const MONEY_OUT_DIR = join(import.meta.dir, "..", "fixtures", "stripe", "money-out");

/** One money-out fixture: its file name, exact body, event id and type. */
export interface MoneyOutEvent {
  name: string;
  body: string;
  id: string;
  type: string;
}

/** The twenty money-out fixtures, in file order. */
export function moneyOut(): MoneyOutEvent[] {
  return readdirSync(MONEY_OUT_DIR)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((name) => {
      const body = readFileSync(join(MONEY_OUT_DIR, name), "utf8");
      const event = JSON.parse(body) as { id: string; type: string };
      return { name, body, id: event.id, type: event.type };
    });
}

/** The fixture whose file name starts with `prefix` (e.g. "07_"). */
export function moneyOutEvent(prefix: string): MoneyOutEvent {
  const found = moneyOut().find((e) => e.name.startsWith(prefix));
  if (!found) throw new Error(`No money-out fixture ${prefix}`);
  return found;
}

/** Empties every table the Stripe handlers write. */
export async function truncateMoney(db: Db): Promise<void> {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices, stripe_charges, invoice_payments, refunds, disputes`;
}

const IN1 = "in_1SmA1pLgUG5tbmjcRfA0xRef";
const IN2 = "in_1SmA2qLgUG5tbmjcRfB0xDsp";

/** The end state money-out/README.md gives for the twenty fixtures (amounts in minor units). */
export const MONEY_OUT_END_STATE = {
  invoices: [
    { id: IN1, status: "paid" },
    { id: IN2, status: "paid" },
  ],
  ledger: [
    { invoice_id: IN1, kind: "payment", amount: 10000, currency: "usd", balance_transaction: null },
    { invoice_id: IN1, kind: "refund", amount: 2500, currency: "usd", balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1" },
    { invoice_id: IN1, kind: "refund", amount: 1500, currency: "usd", balance_transaction: "txn_3SmA1pLgUG5tbmjc0re2" },
    { invoice_id: IN2, kind: "dispute_fee", amount: 1500, currency: "usd", balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW" },
    { invoice_id: IN2, kind: "dispute_reinstatement", amount: 20000, currency: "usd", balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspR" },
    { invoice_id: IN2, kind: "dispute_withdrawal", amount: 20000, currency: "usd", balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW" },
    { invoice_id: IN2, kind: "payment", amount: 20000, currency: "usd", balance_transaction: null },
  ],
  refunds: [
    { id: "re_3SmA1pLgUG5tbmjc0Ref1", status: "succeeded" },
    { id: "re_3SmA1pLgUG5tbmjc0Ref2", status: "succeeded" },
    { id: "re_3SmA1pLgUG5tbmjc0Ref3", status: "failed" },
  ],
  disputes: [{ id: "dp_1SmA2qLgUG5tbmjc0DspB", status: "won" }],
  net: [
    {
      invoice_id: IN1,
      currency: "usd",
      paid: 10000,
      refunded: 4000,
      dispute_withdrawn: 0,
      dispute_fees: 0,
      dispute_reinstated: 0,
      net: 6000,
    },
    {
      invoice_id: IN2,
      currency: "usd",
      paid: 20000,
      refunded: 0,
      dispute_withdrawn: 20000,
      dispute_fees: 1500,
      dispute_reinstated: 20000,
      net: 18500,
    },
  ],
  outbox: [
    { event_type: "DisputeFeeBooked", n: 1 },
    { event_type: "DisputeFundsReinstated", n: 1 },
    { event_type: "DisputeFundsWithdrawn", n: 1 },
    { event_type: "InvoicePaymentBooked", n: 2 },
    { event_type: "RefundBooked", n: 2 },
  ],
  inbox: [{ state: "processed", n: 20 }],
};

/** The money-out state of `db`, in the shape of {@link MONEY_OUT_END_STATE}. */
export async function moneyOutState(db: Db): Promise<typeof MONEY_OUT_END_STATE> {
  const [invoices, ledger, refunds, disputes, net, outbox, inbox] = await Promise.all([
    db`select id, status from invoices order by id`,
    db`select invoice_id, kind, amount::int, currency, balance_transaction from ledger_entries_linked order by invoice_id, kind, balance_transaction`,
    db`select id, status from refunds order by id`,
    db`select id, status from disputes order by id`,
    db`
      select invoice_id, currency, paid::int, refunded::int, dispute_withdrawn::int, dispute_fees::int, dispute_reinstated::int, net::int
        from invoice_net
       order by invoice_id
    `,
    db`select event_type, count(*)::int as n from outbox group by 1 order by 1`,
    db`select state, count(*)::int as n from webhook_inbox_state group by 1 order by 1`,
  ]);
  return { invoices, ledger, refunds, disputes, net, outbox, inbox } as unknown as typeof MONEY_OUT_END_STATE;
}
