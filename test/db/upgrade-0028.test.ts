// Upgrading to unique outbox message ids (sql/0028) from a 0027 database whose outbox already holds
// rows sharing a derived id (two GitHub pushes with the same `after`, written by the handler of fcab188:
// review R9) and a row from before sql/0024 (no id): every row keeps or gets an id of its own, and the
// same fact written again afterwards writes nothing.
import { afterAll, expect, test } from "bun:test";
import { migrate } from "../../src/db/migrate.ts";
import { insertOutbox } from "../../src/handlers/insert-outbox.ts";
import { claimOutboxBatch } from "../../src/outbox/claim.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { freshDatabase } from "../support/helpers.ts";

const fresh = await freshDatabase({ migrated: false });
const db = fresh.db;
afterAll(() => fresh.drop());
const ALL = loadMigrations();

test("`migrate()` to sql/0028 gives rows that share a message id all but the first `msg_outbox_<id>`, keeps null ids, and then makes the id unique", async () => {
  await migrate(
    db,
    ALL.filter((m) => m.version <= 27),
  );
  // As fcab188's recordPush wrote them: aggregate `<repository>@<after>`, no message key.
  const push = (ref: string) => db`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload)
    values ('GitHubRepository', ${`acme/shop@${"0".repeat(40)}`}, 'GitHubPush', ${db.json({ ref })})
    returning id::text as id, message_id
  `;
  const [first] = await push("refs/heads/old-a");
  const [second] = await push("refs/heads/old-b");
  const [third] = await push("refs/heads/old-c");
  expect(new Set([first!.message_id, second!.message_id, third!.message_id]).size).toBe(1);
  const [other] = await db<{ id: string; message_id: string }[]>`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload)
    values ('Invoice', 'in_upgrade_1', 'InvoicePaymentBooked', '{}')
    returning id::text as id, message_id
  `;
  const [legacy] = await db<{ id: string }[]>`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload)
    values ('Invoice', 'in_upgrade_legacy', 'InvoicePaymentBooked', '{}')
    returning id::text as id
  `;
  await db`update outbox set message_id = null where id = ${legacy!.id}::bigint`; // as sql/0024 left older rows

  expect(await migrate(db, ALL)).toEqual(ALL.filter((m) => m.version > 27).map((m) => m.name));
  const ids = await db<{ id: string; message_id: string | null }[]>`select id::text as id, message_id from outbox order by id`;
  expect([...ids]).toEqual([
    { id: first!.id, message_id: first!.message_id },
    { id: second!.id, message_id: `msg_outbox_${second!.id}` },
    { id: third!.id, message_id: `msg_outbox_${third!.id}` },
    { id: other!.id, message_id: other!.message_id },
    { id: legacy!.id, message_id: null },
  ]);
  const claimed = await claimOutboxBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 10 });
  expect(new Set(claimed.map((m) => m.messageId)).size).toBe(5);

  // The same fact again writes nothing; a duplicate id by hand is refused.
  const again = await db.begin((tx) =>
    insertOutbox(tx, { account: "", aggregate: ["Invoice", "in_upgrade_1"], eventType: "InvoicePaymentBooked", messageKey: "" }, {}),
  );
  expect(again).toHaveLength(0);
  const duplicate = await db`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload) values ('Invoice', 'in_upgrade_1', 'InvoicePaymentBooked', '{}')
  `.catch((err: { code?: string }) => err.code);
  expect(duplicate).toBe("23505");
  expect((await db<{ n: number }[]>`select count(*)::int as n from outbox`)[0]?.n).toBe(5);
});
