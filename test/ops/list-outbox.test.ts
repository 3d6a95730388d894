// listOutbox() (`bun run inbox outbox`) against real PostgreSQL.
import { afterAll, expect, test } from "bun:test";
import { listOutbox } from "../../src/ops/outbox.ts";
import { freshDatabase } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());

test("`listOutbox()` lists unpublished rows oldest first by numeric id (10 after 9), parked ones with --needs-review only", async () => {
  await db`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload, published_at, needs_review_at)
    select 'invoice', 'in_list_' || g, 'InvoicePaymentBooked', '{}',
           case when g = 5 then now() end, case when g = 11 then now() end
      from generate_series(1, 12) g
  `;
  const ids = (await listOutbox(db, {}, 10)).map((r) => Number(r.id));
  expect(ids).toEqual([1, 2, 3, 4, 6, 7, 8, 9, 10, 11]);
  expect((await listOutbox(db, { needsReview: true })).map((r) => [r.aggregateId, r.state])).toEqual([["in_list_11", "needs_review"]]);
});
