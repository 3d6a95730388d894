-- The money-out business key (balance_transaction, kind) of 0011 as a partial unique index over
-- money-out rows only. Payment rows carry no balance transaction (check
-- ledger_entries_money_out_keyed_by_txn), and a unique index never finds two NULLs equal, so they were
-- never checked by it; they only paid for an index entry each. Money-out rows keep exactly the same
-- uniqueness; the handlers name the predicate in their ON CONFLICT so PostgreSQL infers this index
-- (PostgreSQL manual, INSERT, "ON CONFLICT Clause": index_predicate).
alter table ledger_entries drop constraint ledger_entries_balance_transaction_kind_key;
create unique index ledger_entries_balance_transaction_kind_key on ledger_entries (balance_transaction, kind) where kind <> 'payment';
