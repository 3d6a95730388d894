// receiveSync when PostgreSQL rolls its attempt back as a deadlock: a concurrent transaction holding
// the invoice row and then wanting the delivery's inbox key (what a backfill page once did) must not
// turn the delivery into a 5xx; the attempt is tried again and the event is applied once.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { inboxRow, insertInbox } from "../../src/inbox/inbox.ts";
import { handlersFor } from "../../src/receiver/endpoints.ts";
import { receiveSync } from "../../src/receiver/receive.ts";
import { closeAll, connections, count, fixture, freshDatabase, verified } from "../support/helpers.ts";

setDefaultTimeout(30_000);

const fresh = await freshDatabase();
const db: Db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, invoices, ledger_entries, outbox`;
});

const target = { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! };
const created = verified(fixture("01_invoice.created_evt_1SkB1aLgUG5tbmjc0created.json"));
const finalized = verified(fixture("02_invoice.finalized_evt_1SkB1bLgUG5tbmjc0finaliz.json"));
const keyOf = (e: { id: string }) => ({ provider: "stripe", endpoint: "billing", eventId: e.id });

test("`receiveSync()` chosen as a deadlock's victim tries again and the event is applied once, not thrown", async () => {
  const [other, webhook] = connections(fresh.url, 2);
  try {
    let webhookOutcome: Promise<string> | undefined;
    // The other transaction: creates the invoice (holding its row), lets the webhook take the
    // finalized event's key and wait on that row, then wants the same key: a lock cycle. Its own
    // deadlock_timeout is long, so the webhook's check finds the cycle and rolls the webhook back. The
    // webhook's check runs once, deadlock_timeout after its wait began: 3 s (not the default 1 s), so
    // the cycle is closed by then even when a loaded machine is slow to send the other's insert.
    await webhook!`set deadlock_timeout = '3s'`;
    await other!.begin(async (tx) => {
      await tx`set local deadlock_timeout = '20s'`;
      expect((await insertInbox(tx, [inboxRow(keyOf(created), created, "processed")])).size).toBe(1);
      await target.handlers[created.type]!(tx, created.subject.object, { ...keyOf(created), eventType: created.type });
      webhookOutcome = receiveSync(webhook!, target, finalized);
      // Wait until the webhook's handler waits on a lock (it holds the key, wants the invoice).
      for (let i = 0; i < 200; i++) {
        const [w] =
          await db`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%into invoices%'`;
        if (w!.n > 0) break;
        await Bun.sleep(25);
      }
      expect((await insertInbox(tx, [inboxRow(keyOf(finalized), finalized, "processed")])).size).toBe(1);
      await target.handlers[finalized.type]!(tx, finalized.subject.object, { ...keyOf(finalized), eventType: finalized.type });
    });
    // The webhook's retry found the key recorded by the other transaction: a duplicate, not an error.
    expect(await webhookOutcome!).toBe("duplicate");
    expect(await count(db, "webhook_inbox")).toBe(2);
    const [inv] = await db`select status from invoices`;
    expect(inv!.status).toBe("open");
  } finally {
    await closeAll([other!, webhook!]);
  }
});
