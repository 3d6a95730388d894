// selectNeedsReview() and applyToSelection(): a bulk action touches exactly the confirmed rows.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { requeue } from "../../src/ops/requeue.ts";
import { applyToSelection, selectNeedsReview } from "../../src/ops/selection.ts";
import { freshDatabase, inboxRowFor } from "../support/helpers.ts";

let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;

beforeAll(async () => {
  database = await freshDatabase();
  db = database.db;
});

afterAll(() => database?.drop());

/** A needs-review row with its payload, written as the receiver parks an event (insertInbox, `failed.parked`). */
async function park(eventId: string, type = "invoice.sel"): Promise<void> {
  const row = inboxRowFor(
    { provider: "stripe", endpoint: "billing", eventId },
    {
      type,
      payload: JSON.stringify({ id: eventId }),
      failed: { error: "Error: x", parked: true, backoff: { baseMs: 60_000, capMs: 600_000 } },
    },
  );
  expect((await insertInbox(db, [row])).size).toBe(1);
}

const unprocessed = async (type: string) =>
  (await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox_state where event_type = ${type} and state = 'unprocessed'`)[0]
    ?.n;

test("`applyToSelection()` requeues the confirmed rows when the set is unchanged", async () => {
  await park("evt_s1");
  await park("evt_s2");
  const selection = await selectNeedsReview(db, { eventType: "invoice.sel" });
  expect(selection.count).toBe(2);
  const outcome = await applyToSelection(db, { eventType: "invoice.sel" }, selection, (tx) =>
    requeue(tx, { eventType: "invoice.sel" }, false),
  );
  expect(outcome.applied).toBe(true);
  expect(await unprocessed("invoice.sel")).toBe(2);
});

test("`applyToSelection()` changes nothing when a row joined, or one was swapped for another with the same count", async () => {
  await park("evt_t1", "invoice.swap");
  await park("evt_t2", "invoice.swap");
  const selection = await selectNeedsReview(db, { eventType: "invoice.swap" });
  await park("evt_t3", "invoice.swap");
  const joined = await applyToSelection(db, { eventType: "invoice.swap" }, selection, (tx) =>
    requeue(tx, { eventType: "invoice.swap" }, false),
  );
  expect(joined).toEqual({ applied: false, now: { count: 3, digest: expect.stringMatching(/^[0-9a-f]{32}$/) } });
  await requeue(db, { eventId: "evt_t1" }, false);
  const swapped = await applyToSelection(db, { eventType: "invoice.swap" }, selection, (tx) =>
    requeue(tx, { eventType: "invoice.swap" }, false),
  );
  expect(swapped.applied).toBe(false);
  expect((await selectNeedsReview(db, { eventType: "invoice.swap" })).count).toBe(2);
  expect(await unprocessed("invoice.swap")).toBe(1);
});
