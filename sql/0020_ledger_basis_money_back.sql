-- One basis for every ledger row, and ledger kinds for money that came back.
--
-- amount/currency: the money as the customer and the invoice see it, Stripe's presentment amount:
-- an invoice's amount_paid, a refund's amount, a dispute's disputed amount (a dispute balance
-- transaction in another currency than its dispute was converted by Stripe; its row books the
-- disputed amount, never a conversion of ours). So every sum of invoice_net per (invoice, currency)
-- adds like with like. A Stripe fee exists only in the currency Stripe charged it in (the balance
-- transaction's, the account's settlement currency): a fee row's amount/currency is the fee as charged.
--
-- settlement_amount/settlement_currency: what the row's balance transaction moved in the Stripe
-- balance (its gross `amount`, or its `fee` for a fee row), ≥ 0 like amount, when the event carries
-- the balance transaction itself: a dispute lists its balance transactions; a refund, a charge and
-- an invoice name none or only by id, so their rows have null here (not known, never guessed).
--
-- Money that came back (kinds, amounts ≥ 0 as before, the kind gives the direction):
-- - refund_reversal: a refund that failed after its money left; its failure_balance_transaction
--   returned the money to the balance (Stripe API reference, "The Refund object"). Keyed by that
--   balance transaction, one per refund, in the refund's amount and currency.
-- - dispute_fee_reversal: a dispute fee Stripe gave back (a dispute balance transaction whose fee is
--   negative: fees are positive when assessed). Keyed by that balance transaction.
-- net = payment − refund + refund_reversal − dispute_withdrawal − dispute_fee + dispute_fee_reversal
--       + dispute_reinstatement.
alter table ledger_entries
  drop constraint ledger_entries_kind_check,
  add constraint ledger_entries_kind_check
    check (kind in ('payment', 'refund', 'refund_reversal', 'dispute_withdrawal', 'dispute_fee', 'dispute_fee_reversal',
                    'dispute_reinstatement')),
  add column settlement_amount bigint check (settlement_amount >= 0),
  add column settlement_currency text,
  add constraint ledger_entries_settlement_pair
    check ((settlement_amount is null) = (settlement_currency is null));

-- A refund is reversed at most once, whatever failure balance transaction a later event names.
create unique index ledger_entries_one_reversal_per_refund on ledger_entries (source_id) where kind = 'refund_reversal';

-- The balance transaction that returned a failed refund's money, learnt once like balance_transaction.
alter table refunds add column failure_balance_transaction text;

-- Rows booked before this file: every dispute row was booked from its balance transaction, so that is
-- its settlement. A withdrawal converted from the dispute's currency books the disputed amount, and so
-- does a converted reinstatement of a won dispute (Stripe returns the entire amount); a converted
-- reinstatement of a dispute not won keeps its settlement figures, which nothing here can convert: the
-- handler refuses such a movement (needs-review) from now on. Payments and refunds knew no settlement.
update ledger_entries
   set settlement_amount = amount,
       settlement_currency = currency
 where kind in ('dispute_withdrawal', 'dispute_fee', 'dispute_reinstatement');
update ledger_entries l
   set amount = d.amount,
       currency = d.currency
  from disputes d
 where d.id = l.source_id
   and l.currency <> d.currency
   and (l.kind = 'dispute_withdrawal' or (l.kind = 'dispute_reinstatement' and d.status = 'won'));

-- The settlement figures next to every linked row (columns appended: the view keeps its others).
drop view invoice_net;
create or replace view ledger_entries_linked as
select l.id, l.kind, l.amount, l.currency, l.balance_transaction, l.payment_intent, l.charge, l.source_id,
       l.event_id, l.booked_at,
       coalesce(l.invoice_id, (
         select ip.invoice_id
           from invoice_payments ip
          where ip.payment_intent = coalesce(l.payment_intent, c.payment_intent)
             or ip.charge = l.charge
          order by ip.invoice_id
          limit 1
       )) as invoice_id,
       l.settlement_amount, l.settlement_currency
  from ledger_entries l
  left join stripe_charges c on c.id = l.charge;

-- Net money per invoice and currency (the sign convention above); invoice_id null: not linked. A
-- cross-currency invoice has its customer money in the presentment row and Stripe's fees in a row of
-- the currency they were charged in: no row adds two currencies or two bases.
create view invoice_net as
select invoice_id, currency,
       coalesce(sum(amount) filter (where kind = 'payment'), 0) as paid,
       coalesce(sum(amount) filter (where kind = 'refund'), 0) as refunded,
       coalesce(sum(amount) filter (where kind = 'refund_reversal'), 0) as refunds_reversed,
       coalesce(sum(amount) filter (where kind = 'dispute_withdrawal'), 0) as dispute_withdrawn,
       coalesce(sum(amount) filter (where kind = 'dispute_fee'), 0) as dispute_fees,
       coalesce(sum(amount) filter (where kind = 'dispute_fee_reversal'), 0) as dispute_fees_returned,
       coalesce(sum(amount) filter (where kind = 'dispute_reinstatement'), 0) as dispute_reinstated,
       sum(case when kind in ('payment', 'refund_reversal', 'dispute_fee_reversal', 'dispute_reinstatement') then amount
                else -amount end) as net
  from ledger_entries_linked
 group by invoice_id, currency;
