// The one handler contract: a plain `(tx, object, context)` function inside the transaction that holds
// the event's inbox row. The hazards of the statement-step form it replaced (a step writing for a
// duplicate, a step PostgreSQL never evaluated, two steps writing one table) are impossible by
// construction; what a table can get wrong is refused when it is built.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { eventCreatedAt, handlerTable, HandlerTableError, type Handler, type HandlerTable } from "../../src/handlers/handler-table.ts";
import { receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { closeAll, connections, count, eventBody, freshDatabase, verified } from "../support/helpers.ts";
import { receiveAsync } from "../../src/receiver/receive.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { processClaim } from "../../src/worker/process-claim.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox`;
  await db`create table if not exists marks (id bigint generated always as identity primary key, event_id text not null, note text)`;
  await db`truncate marks`;
});

/** An event of type `thing.happened` whose object is `{ id }`. */
const happened = (eventId: string) => verified(eventBody(eventId, "thing.happened", { id: `obj_${eventId}`, object: "thing" }));
const target = (handlers: HandlerTable): ReceiveTarget => ({ provider: "stripe", endpoint: "marks", handlers });

/** A handler that is NOT idempotent on its own: every run inserts a row. Only the inbox keeps it to one run per event. */
const marking: Handler = async (tx, _object, context) => {
  await tx`insert into marks (event_id) values (${context.eventId})`;
};

describe("handlerTable()", () => {
  test("`handlerTable()` builds one frozen table from several parts", () => {
    const table = handlerTable({ "a.created": marking }, { "b.updated": marking, "v1.c.d_e": marking });
    expect(Object.keys(table).sort()).toEqual(["a.created", "b.updated", "v1.c.d_e"]);
    expect(Object.isFrozen(table)).toBe(true);
  });

  test("`handlerTable()` refuses an event type given twice across its parts, naming it", () => {
    expect(() => handlerTable({ "invoice.paid": marking }, { "invoice.paid": marking })).toThrow(
      new HandlerTableError('Handler table: "invoice.paid" has two handlers; give each event type one'),
    );
  });

  test("`handlerTable()` refuses a key that is not an event type, and a value that is not a handler", () => {
    expect(() => handlerTable({ "Invoice Paid": marking })).toThrow('"Invoice Paid" is not an event type');
    expect(() => handlerTable({ "": marking })).toThrow('"" is not an event type');
    expect(() => handlerTable({ "a.b": "insert into marks" as unknown as Handler })).toThrow(
      'the handler of "a.b" is not a function (string)',
    );
  });

  test("`handlerTable()` refuses the steps-builder shape of the old statement handlers (four parameters)", () => {
    const steps = ((_sql: unknown, _object: unknown, _context: unknown, _helpers: unknown) => ({})) as unknown as Handler;
    expect(() => handlerTable({ "a.b": steps })).toThrow('the handler of "a.b" takes 4 parameters; a handler is (tx, object, context)');
  });
});

describe("a plain handler in the inbox transaction", () => {
  test("`receiveSync()` runs a handler that writes without any check once: a redelivery answers duplicate and writes nothing", async () => {
    const table = handlerTable({ "thing.happened": marking });
    const event = happened("evt_plain_once");
    expect(await receiveSync(db, target(table), event)).toBe("processed");
    expect(await receiveSync(db, target(table), event)).toBe("duplicate");
    expect(await count(db, "marks")).toBe(1);
  });

  test("`receiveSync()` ×8 concurrent deliveries of one event (one connection each) run its handler once: one processed, seven duplicates", async () => {
    const table = handlerTable({ "thing.happened": marking });
    const actors = connections(fresh.url, 8);
    try {
      const outcomes = await Promise.all(actors.map((actor) => receiveSync(actor, target(table), happened("evt_plain_8"))));
      expect(outcomes.sort()).toEqual([
        "duplicate",
        "duplicate",
        "duplicate",
        "duplicate",
        "duplicate",
        "duplicate",
        "duplicate",
        "processed",
      ]);
      expect(await count(db, "marks")).toBe(1);
    } finally {
      await closeAll(actors);
    }
  });

  test("the worker runs a handler once when a late worker's stale claim comes after another worker settled the row: `skipped`, nothing written", async () => {
    const table = handlerTable({ "thing.happened": marking });
    expect(await receiveAsync(db, target(table), happened("evt_plain_claimed"))).toBe("queued");
    const options = { tables: { stripe: table }, timeoutMs: 5_000, maxAttempts: 10, backoff: { baseMs: 60_000, capMs: 600_000 } };
    const [stale] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
    await db`update webhook_inbox set available_at = now()`; // its lease expired
    const [fresher] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
    expect((await processClaim(db, fresher!, options)).outcome).toBe("processed");
    expect((await processClaim(db, stale!, options)).outcome).toBe("skipped");
    expect(await count(db, "marks")).toBe(1);
  });

  test("a handler statement that calls a function (`select f(…)`) takes effect: PostgreSQL evaluates every statement sent", async () => {
    await db`
      create or replace function announce_mark(event text) returns void language sql as $$
        insert into outbox (aggregate_type, aggregate_id, event_type, payload)
        values ('Mark', event, 'MarkAnnounced', jsonb_build_object('event_id', event))
      $$`;
    const announcing = handlerTable({
      "thing.happened": async (tx, _object, context) => {
        await tx`select announce_mark(${context.eventId})`;
      },
    });
    expect(await receiveSync(db, target(announcing), happened("evt_plain_fn"))).toBe("processed");
    expect(await receiveSync(db, target(announcing), happened("evt_plain_fn"))).toBe("duplicate");
    expect(await count(db, "outbox", "aggregate_id = 'evt_plain_fn'")).toBe(1);
  });

  test("a handler may write one table in two statements: the update sees the row its insert wrote", async () => {
    const twoStatements = handlerTable({
      "thing.happened": async (tx, _object, context) => {
        await tx`insert into marks (event_id) values (${context.eventId})`;
        await tx`update marks set note = 'seen by the second statement' where event_id = ${context.eventId}`;
      },
    });
    expect(await receiveSync(db, target(twoStatements), happened("evt_plain_two"))).toBe("processed");
    expect(await db`select note from marks`).toEqual([{ note: "seen by the second statement" }] as never);
  });

  test("a handler that fails after writing leaves nothing: the inbox row and its writes roll back together", async () => {
    const failing = handlerTable({
      "thing.happened": async (tx, _object, context) => {
        await tx`insert into marks (event_id) values (${context.eventId})`;
        throw new Error("Ledger is locked for the month-end close");
      },
    });
    expect(await receiveSync(db, target(failing), happened("evt_plain_fail")).catch((err: unknown) => String(err))).toBe(
      "Error: Ledger is locked for the month-end close",
    );
    expect(await count(db, "marks")).toBe(0);
    expect(await count(db, "webhook_inbox")).toBe(0);
  });

  test("a handler that builds a statement it never awaits is refused: PermanentError naming the type, nothing committed, never `processed`", async () => {
    const forgetful = handlerTable({
      "thing.happened": async (tx, _object, context) => {
        await tx`insert into marks (event_id, note) values (${context.eventId}, 'awaited')`;
        void tx`insert into marks (event_id, note) values (${context.eventId}, 'forgotten')`; // no await: never sent
      },
    });
    const refused = await receiveSync(db, target(forgetful), happened("evt_plain_no_await")).then(
      () => undefined,
      (err: unknown) => err as Error,
    );
    expect(refused?.name).toBe("PermanentError");
    expect(refused?.message).toStartWith("The thing.happened handler built 1 statement(s) it never awaited");
    expect(await count(db, "marks")).toBe(0);
    expect(await count(db, "webhook_inbox")).toBe(0);

    // The worker parks such a row as needs-review with the same reason instead of settling it.
    expect(await receiveAsync(db, target(forgetful), happened("evt_plain_no_await_async"))).toBe("queued");
    const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
    const options = { tables: { stripe: forgetful }, timeoutMs: 5_000, maxAttempts: 10, backoff: { baseMs: 60_000, capMs: 600_000 } };
    expect((await processClaim(db, claim!, options)).outcome).toBe("needs_review");
    expect(await db`select processed_at is null as open, needs_review_at is not null as parked from webhook_inbox`).toEqual([
      { open: true, parked: true },
    ] as never);
    expect(await count(db, "marks")).toBe(0);
  });

  test("a fragment embedded in an awaited statement (`tx\`… ${tx\`…\`}\``) and `tx.unsafe` awaited are not counted as forgotten", async () => {
    const withFragment = handlerTable({
      "thing.happened": async (tx, _object, context) => {
        const note = tx`, note`;
        await tx`insert into marks (event_id ${note}) values (${context.eventId}, 'fragment')`;
        await tx.unsafe("update marks set note = note || ' + unsafe' where event_id = $1", [context.eventId]);
      },
    });
    expect(await receiveSync(db, target(withFragment), happened("evt_plain_fragment"))).toBe("processed");
    expect(await db`select note from marks`).toEqual([{ note: "fragment + unsafe" }] as never);
  });
});

test("`eventCreatedAt()` gives a handler its event's created time, in sync mode and from the worker's claim", async () => {
  const seen: (number | undefined)[] = [];
  const table = handlerTable({
    "thing.happened": async (tx, _object, context) => void seen.push((await eventCreatedAt(tx, context))?.getTime()),
  });
  expect(await receiveSync(db, target(table), happened("evt_created_sync"))).toBe("processed");
  expect(await receiveAsync(db, target(table), happened("evt_created_async"))).toBe("queued");
  const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
  expect(
    (
      await processClaim(db, claim!, {
        tables: { stripe: table },
        timeoutMs: 5_000,
        maxAttempts: 3,
        backoff: { baseMs: 1_000, capMs: 1_000 },
      })
    ).outcome,
  ).toBe("processed");
  // stripeEventBody's created: 1764461520 (Unix seconds)
  expect(seen).toEqual([1_764_461_520_000, 1_764_461_520_000]);
});
