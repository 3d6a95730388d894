// Booking what `refunds` records: each refund once checked against its charge or invoice payment, the
// reversal of one that failed after its money left, and the check that a charge still adds up.
import type { Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import type { HandlerContext } from "./handler-table.ts";
import { bookMoneyOut } from "./money-ledger.ts";

/** A refund recorded in `refunds` whose money moved and is not booked yet (amounts in minor units). */
interface DueRefund {
  id: string;
  charge: string | null;
  payment_intent: string | null;
  amount: string;
  currency: string;
  balance_transaction: string;
  /** The movement that already returned the money, if the refund failed: it nets to nothing. */
  failure_balance_transaction: string | null;
}

/** What a refund is checked against: its charge if recorded, else its payment intent's invoice payments. */
interface RefundLimit {
  /** "charge ch_…" or "invoice payment of pi_…", for the error message. */
  what: string;
  amount: number;
  /** null when the invoice payments of one payment intent disagree on the currency. */
  currency: string | null;
  /** Refunds already booked against the same limit, less those reversed. */
  booked: number;
}

/** The limit `refund` is checked against, or null while neither its charge nor its invoice payment is known. */
async function limitOf(tx: Tx, refund: DueRefund, account: string): Promise<RefundLimit | null> {
  if (refund.charge !== null) {
    const [charge] = await tx<{ amount: string; currency: string; booked: string }[]>`
      select c.amount::text, c.currency,
             -- A refund counts, its reversal counts back.
             (select coalesce(sum(case when l.kind = 'refund_reversal' then -l.amount else l.amount end), 0)
                from ledger_entries l
               where l.account = c.account
                 and l.kind in ('refund', 'refund_reversal')
                 and l.charge = c.id)::text as booked
        from stripe_charges c
       where c.account = ${account}
         and c.id = ${refund.charge}
    `;
    if (charge !== undefined)
      return { what: `charge ${refund.charge}`, amount: Number(charge.amount), currency: charge.currency, booked: Number(charge.booked) };
  }
  const [paid] = await tx<{ amount: string | null; currency: string | null; booked: string }[]>`
    select sum(ip.amount_paid)::text as amount,
           case when min(ip.currency) = max(ip.currency) then min(ip.currency) end as currency,
           (select coalesce(sum(case when l.kind = 'refund_reversal' then -l.amount else l.amount end), 0)
              from ledger_entries l
             where l.account = ${account}
               and l.kind in ('refund', 'refund_reversal')
               and (l.payment_intent = ${refund.payment_intent}::text
                    or l.charge = ${refund.charge}::text
                    or l.charge in (select c.id from stripe_charges c
                                     where c.account = ${account} and c.payment_intent = ${refund.payment_intent}::text)))::text as booked
      from invoice_payments ip
     where ip.account = ${account}
       and (ip.payment_intent = ${refund.payment_intent}::text
            or ip.charge = ${refund.charge}::text)
  `;
  if (paid?.amount == null) return null;
  return {
    what: `the invoice payment of ${refund.payment_intent ?? refund.charge}`,
    amount: Number(paid.amount),
    currency: paid.currency,
    booked: Number(paid.booked),
  };
}

/**
 * Books every refund of `charge` or `paymentIntent` (a refund names either or both; a charge links its
 * payment intent) whose money moved (a balance transaction recorded, whatever its status since) and
 * that is not booked yet, in refund id order, each checked first against what is known: its charge
 * (amount, currency) if recorded, else the invoice payments of its payment intent (refunds booked
 * there less those reversed; a refund whose failure already returned its money nets to nothing). A
 * refund neither is known for stays recorded and unbooked: the charge or invoice payment event that
 * arrives later calls this and books it then, so no order books unchecked money. A refund in another
 * currency, or one that takes the refunds above the amount, is a PermanentError: the event that
 * completes the contradiction is parked and nothing it would book is booked. Then reverses the booked
 * refunds whose failure balance transaction is known ({@link reverseFailedRefunds}) and checks the
 * charge still adds up ({@link checkChargeAddsUp}). Caller holds `lockMoneyKeys` (money-ledger.ts) on the same
 * charge and payment intent.
 */
export async function settleRefunds(tx: Tx, charge: string | null, paymentIntent: string | null, context: HandlerContext): Promise<void> {
  const account = context.account ?? "";
  const due = await tx<DueRefund[]>`
    select r.id, r.charge, r.payment_intent, r.amount::text, r.currency, r.balance_transaction, r.failure_balance_transaction
      from refunds r
     where r.account = ${account}
       and (r.charge = ${charge}::text
            or r.payment_intent = ${paymentIntent}::text
            or r.charge in (select c.id from stripe_charges c where c.account = ${account} and c.payment_intent = ${paymentIntent}::text))
       -- A recorded balance transaction came from an event where money moved (a failed one carrying it
       -- also names the failure balance transaction, which reverses the booking; a canceled one carrying
       -- it is refused), so a later failed status without one does not unbook it in any order.
       and r.balance_transaction is not null
       and r.amount > 0
       and not exists (select 1 from ledger_entries l where l.account = r.account and l.kind = 'refund' and l.source_id = r.id)
     order by r.id
  `;
  for (const refund of due) {
    const limit = await limitOf(tx, refund, account);
    if (limit === null) continue;
    if (limit.currency !== refund.currency) {
      throw new PermanentError(
        `Cannot book refund ${refund.id}: ${refund.currency}, but ${limit.what} is in ${limit.currency ?? "several currencies"}: not booked (reconcile by hand)`,
      );
    }
    const adds = refund.failure_balance_transaction === null ? Number(refund.amount) : 0;
    if (limit.booked + adds > limit.amount) {
      throw new PermanentError(
        `Cannot book refund ${refund.id}: refunds would total ${limit.booked + adds}, above ${limit.what}'s ${limit.amount} ${limit.currency}: not booked (reconcile by hand)`,
      );
    }
    await bookRefund(tx, "refund", refund, refund.balance_transaction, context);
  }
  await reverseFailedRefunds(tx, charge, paymentIntent, context);
  if (charge !== null) await checkChargeAddsUp(tx, charge, account);
}

/**
 * Books a `refund_reversal` for every booked refund of `charge` or `paymentIntent` whose failure
 * balance transaction is recorded and that is not reversed yet: the money the refund sent came back
 * to the balance (Stripe API reference, "The Refund object", `failure_balance_transaction`). In the
 * refund's own amount and currency, keyed by the failure balance transaction; one per refund (a unique
 * index). Booked only after its refund, so no order books a reversal of money that was never booked.
 * Caller holds `lockMoneyKeys` (money-ledger.ts) on the same charge and payment intent.
 */
async function reverseFailedRefunds(tx: Tx, charge: string | null, paymentIntent: string | null, context: HandlerContext): Promise<void> {
  const account = context.account ?? "";
  const failed = await tx<(Omit<DueRefund, "failure_balance_transaction"> & { failure_balance_transaction: string })[]>`
    select r.id, r.charge, r.payment_intent, r.amount::text, r.currency, r.balance_transaction, r.failure_balance_transaction
      from refunds r
     where r.account = ${account}
       and (r.charge = ${charge}::text
            or r.payment_intent = ${paymentIntent}::text
            or r.charge in (select c.id from stripe_charges c where c.account = ${account} and c.payment_intent = ${paymentIntent}::text))
       and r.failure_balance_transaction is not null
       and exists (select 1 from ledger_entries l where l.account = r.account and l.kind = 'refund' and l.source_id = r.id)
       and not exists (select 1 from ledger_entries l where l.account = r.account and l.kind = 'refund_reversal' and l.source_id = r.id)
     order by r.id
  `;
  for (const refund of failed) await bookRefund(tx, "refund_reversal", refund, refund.failure_balance_transaction, context);
}

/** Books `kind` for `refund` in the refund's own amount and currency under `balanceTransaction`, keyed by the refund. */
function bookRefund(tx: Tx, kind: "refund" | "refund_reversal", refund: DueRefund, balanceTransaction: string, context: HandlerContext) {
  const entry = {
    kind,
    amount: Number(refund.amount),
    currency: refund.currency,
    settlement: null, // the event names the balance transaction only by id
    balanceTransaction,
    sourceId: refund.id,
    charge: refund.charge,
    paymentIntent: refund.payment_intent,
  };
  return bookMoneyOut(tx, entry, context);
}

/**
 * Refuses (PermanentError) when the refunds booked against `charge` (of `account`, `""` the platform) do not add up with the charge as
 * recorded: a refund (or reversal) in another currency than the charge's, or refunds less their
 * reversals above the charge's amount (refunds booked against the invoice payment before the charge
 * arrived). Does nothing while the charge is unknown. Caller holds `lockMoneyKeys` (money-ledger.ts) on the charge.
 */
export async function checkChargeAddsUp(tx: Tx, charge: string, account = ""): Promise<void> {
  const [row] = await tx<{ other_currency: boolean; over: boolean; refunded: string; amount: string; currency: string }[]>`
    select coalesce(bool_or(l.currency <> c.currency), false) as other_currency,
           coalesce(sum(case when l.kind = 'refund_reversal' then -l.amount else l.amount end), 0) > c.amount as over,
           coalesce(sum(case when l.kind = 'refund_reversal' then -l.amount else l.amount end), 0)::text as refunded,
           c.amount::text as amount,
           c.currency
      from stripe_charges c
      left join ledger_entries l on l.account = c.account and l.charge = c.id and l.kind in ('refund', 'refund_reversal')
     where c.account = ${account}
       and c.id = ${charge}
     group by c.account, c.id
  `;
  if (row?.other_currency)
    throw new PermanentError(
      `Cannot book refunds of charge ${charge}: a refund is in another currency than the charge's (${row.currency}): not booked (reconcile by hand)`,
    );
  if (row?.over)
    throw new PermanentError(
      `Cannot book refunds of charge ${charge}: refunds total ${row.refunded}, above the charge's ${row.amount} ${row.currency}: not booked (reconcile by hand)`,
    );
}
