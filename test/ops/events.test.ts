// pageEvents(): keyset paging newest first, the attempts filter, and the bounded payload search.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { pageEvents, PageTooSlowError, TEXT_SCAN_ROWS } from "../../src/ops/events.ts";
import { connect } from "../../src/db/db.ts";
import { freshDatabase } from "../support/helpers.ts";

let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;

beforeAll(async () => {
  database = await freshDatabase();
  db = database.db;
  // 130 rows one second apart (evt_000 oldest), three sharing one received_at to test ties; every
  // tenth has 5 attempts; evt_007 and evt_123 mention cus_needle.
  // Each row is a state row and its payload row under the same key and received_at (sql/0027), written
  // in one statement as insertInbox writes them, with received_at set instead of now().
  await db`
    with r as (
      select 'stripe'::text as provider, 'billing'::text as endpoint, 'evt_' || lpad(i::text, 3, '0') as event_id,
             jsonb_build_object('id', 'evt_' || i, 'data', jsonb_build_object('object', jsonb_build_object('customer', case when i in (7, 123) then 'cus_needle' else 'cus_' || i end))) as payload,
             timestamptz '2026-12-01 10:00:00.123456+00' + case when i between 50 and 52 then 50 else i end * interval '1 second' as received_at,
             case when i % 10 = 0 then 5 else 0 end as attempts
        from generate_series(0, 129) as i
    ), state as (
      insert into webhook_inbox (provider, endpoint, event_id, event_type, received_at, attempts)
      select provider, endpoint, event_id, 'invoice.created', received_at, attempts
        from r
    )
    insert into webhook_inbox_payloads (provider, endpoint, event_id, received_at, payload)
    select provider, endpoint, event_id, received_at, payload
      from r
  `;
});

afterAll(() => database?.drop());

test("`pageEvents()` pages newest first by keyset: every row once, ties on received_at included", async () => {
  const seen: string[] = [];
  let after: string | undefined;
  for (let pages = 0; pages < 20; pages++) {
    const page = await pageEvents(db, {}, { limit: 7, after });
    seen.push(...page.rows.map((r) => r.eventId));
    if (!page.next) break;
    after = page.next;
  }
  expect(seen).toHaveLength(130);
  expect(new Set(seen).size).toBe(130);
  expect(seen[0]).toBe("evt_129");
  expect(seen.at(-1)).toBe("evt_000");
  expect(seen.slice(seen.indexOf("evt_053") + 1, seen.indexOf("evt_053") + 4)).toEqual(["evt_052", "evt_051", "evt_050"]);
});

test("`pageEvents()` filters by attempts at least", async () => {
  const page = await pageEvents(db, { minAttempts: 5 }, { limit: 100 });
  expect(page.rows.map((r) => r.eventId)).toEqual(Array.from({ length: 13 }, (_, i) => `evt_${String(120 - 10 * i).padStart(3, "0")}`));
  expect(page.next).toBeNull();
});

test("`pageEvents()` finds payload text among the rows it may read, and continues from the last row read", async () => {
  const all = await pageEvents(db, {}, { text: "CUS_NEEDLE" });
  expect(all.rows.map((r) => r.eventId)).toEqual(["evt_123", "evt_007"]);
  expect(all.scanned).toBe(130);
  expect(all.next).toBeNull();
  const [first] = (await pageEvents(db, {}, { limit: 1 })).rows;
  expect(first?.eventId).toBe("evt_129");
  const narrow = await pageEvents(db, { since: new Date("2026-12-01T10:01:00Z") }, { text: "cus_needle" });
  expect(narrow.rows.map((r) => r.eventId)).toEqual(["evt_123"]);
  expect(TEXT_SCAN_ROWS).toBe(10_000);
});

test("`pageEvents()` reads at most `scanRows` rows per search page; the next page searches further back", async () => {
  const first = await pageEvents(db, {}, { text: "cus_needle", scanRows: 10 });
  expect(first.rows.map((r) => r.eventId)).toEqual(["evt_123"]);
  expect(first.scanned).toBe(10);
  const second = await pageEvents(db, {}, { text: "cus_needle", scanRows: 10, after: first.next! });
  expect(second.rows).toEqual([]);
  expect(second.scanned).toBe(10);
  let after = second.next;
  const found: string[] = [];
  while (after) {
    const page = await pageEvents(db, {}, { text: "cus_needle", scanRows: 10, after });
    found.push(...page.rows.map((r) => r.eventId));
    after = page.next;
  }
  expect(found).toEqual(["evt_007"]);
});

test("`pageEvents()` refuses a cursor it did not make", async () => {
  await expect(pageEvents(db, {}, { after: "bm90IGEgY3Vyc29y" })).rejects.toThrow("Cannot read the page cursor");
});

test("`pageEvents()` stops a page past `maxMs` with PageTooSlowError (here: waiting on a lock another connection holds)", async () => {
  const other = connect(database.url, { max: 1 });
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const locked = new Promise<void>((ready) => {
    void other.begin(async (tx) => {
      await tx`lock table webhook_inbox in access exclusive mode`;
      ready();
      await held;
    });
  });
  try {
    await locked;
    await expect(pageEvents(db, { minAttempts: 99 }, { maxMs: 200 })).rejects.toBeInstanceOf(PageTooSlowError);
  } finally {
    release();
    await other.end({ timeout: 5 });
  }
  expect((await pageEvents(db, { minAttempts: 5 }, { maxMs: 10_000 })).rows).toHaveLength(13);
});
