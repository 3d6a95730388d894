import type postgres from "postgres";
import type { Tx } from "../db/db.ts";

/** The fact an outbox message announces: what its message id is derived from (sql/0024). */
export interface OutboxFact {
  /** The Stripe account (`acct_…`) whose fact it is; `""` for the platform and for providers without accounts. */
  account: string;
  /** [aggregate_type, aggregate_id], e.g. `["Invoice", "in_…"]`: ordered dispatch delivers one account's aggregate in order. */
  aggregate: [type: string, id: string];
  eventType: string;
  /**
   * Tells apart two facts of one (account, aggregate, event type), e.g. a subscription's access starting
   * again (the event that moved it); `""` when there is only ever one. From what the sender signed,
   * never from an unsigned header: a replay must give the same key.
   */
  messageKey: string;
}

/**
 * The statement that writes one outbox message of `fact` with `payload` unless that fact's message is
 * already there: the message id is derived from the fact as the row is written (sql/0024) and unique
 * (sql/0028), so the same fact written again (a replay under a new inbox key, an event applied again)
 * writes nothing (`on conflict do nothing`). Await it alone, or end a `with` statement with it and name
 * in `ifAny` the CTE that decides: then the message is written only if that CTE returned a row. Answers
 * one row when it wrote the message, none otherwise. Must be sent inside the inbox transaction.
 */
export function insertOutbox(tx: Tx, fact: OutboxFact, payload: Record<string, postgres.JSONValue>, ifAny?: string) {
  return tx`
    insert into outbox (account, aggregate_type, aggregate_id, event_type, message_key, payload)
    select ${fact.account}::text, ${fact.aggregate[0]}::text, ${fact.aggregate[1]}::text, ${fact.eventType}::text,
           ${fact.messageKey}::text, ${tx.json(payload)}::jsonb
    ${ifAny === undefined ? tx`` : tx`where exists (select from ${tx(ifAny)})`}
    on conflict (message_id) do nothing
    returning 1
  `;
}
