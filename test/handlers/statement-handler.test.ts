// statementHandler() against real PostgreSQL: the three ways a one-statement handler used to fail
// silently (a step without the gate writes twice on redelivery, a step named like the framework's own
// CTEs breaks the worker, an insert then an update of one row in two steps does nothing) are now kept
// safe by the framework, in sync mode and in the worker.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { PermanentError, statementHandler, type HandlerTable, type Step } from "../../src/handlers/handler-table.ts";
import { HandlerDefinitionError } from "../../src/handlers/render-steps.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { processClaimed, type ProcessOptions } from "../../src/worker/process-claimed.ts";
import { receiveAsync, receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { closeAll, connections, count, eventBody, freshDatabase, verified } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db: Db = fresh.db;
await db`create table marks (event_id text not null, note text)`;
await db`create table things (id text primary key, state text not null)`;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, marks, things`;
});

/** Writes one `marks` row per application and never tests the gate: the framework must keep it to one. */
const ungated = statementHandler("ungated", (sql, _object, ctx) => ({
  marked: sql`insert into marks (event_id, note) values (${ctx.eventId}::text, 'ungated') returning 1`,
}));

/** {@link ungated} behind a nested block comment, a quoted table and odd spacing: the same write. */
const commentedUngated = statementHandler("commentedUngated", (sql, _object, ctx) => ({
  marked: sql`/* audit /* nested */ */
    INSERT   INTO public."marks" (event_id, note) values (${ctx.eventId}::text, 'commented') RETURNING 1`,
}));

/** A plain insert with no `on conflict`: a redelivery that reaches it hits the primary key (23505). */
const strictInsert = statementHandler("strictInsert", (sql, object) => ({
  created: sql`insert into things (id, state) values (${String(object.id)}::text, 'new') returning id`,
}));

/** Steps named like the framework's own CTEs, one reading the other. */
const clashing = statementHandler("clashing", (sql, _object, ctx, { step }) => ({
  done: sql`insert into marks (event_id, note) values (${ctx.eventId}::text, 'done') returning event_id`,
  inbox: sql`insert into things (id, state) select event_id, 'inbox' from ${step("done")} returning id`,
}));

/** Inserts a row, then updates it in a second step: the update cannot see the insert (one snapshot). */
const insertThenUpdate = statementHandler("insertThenUpdate", (sql, object) => ({
  created: sql`insert into things (id, state) values (${String(object.id)}::text, 'new') returning id`,
  settled: sql`update things set state = 'settled' where id = ${String(object.id)}::text returning id`,
}));

/** Writes without RETURNING: the framework could not count its rows. */
const unreturning = statementHandler("unreturning", (sql, _object, ctx) => ({
  marked: sql`insert into marks (event_id, note) values (${ctx.eventId}::text, 'unreturning')`,
}));

const HANDLERS: HandlerTable = {
  "thing.ungated": ungated,
  "thing.strict": strictInsert,
  "thing.clashing": clashing,
  "thing.twice": insertThenUpdate,
  "thing.unreturning": unreturning,
  "thing.commented": commentedUngated,
};
const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "hazards", handlers: HANDLERS };
const OPTIONS: ProcessOptions = {
  handlersFor: () => HANDLERS,
  timeoutMs: 5_000,
  maxAttempts: 10,
  backoff: { baseMs: 60_000, capMs: 600_000 },
};

const body = (eventId: string, type: string, id = `th_${eventId}`) => eventBody(eventId, type, { id, object: "thing" });

/** Queues `eventId` for the worker and processes its claim twice, as a worker whose lease expired would. */
async function processTwice(eventId: string, type: string): Promise<string[]> {
  expect(await receiveAsync(db, TARGET, verified(body(eventId, type)))).toBe("queued");
  const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
  if (!claim) throw new Error(`${eventId} was not claimed`);
  const first = await processClaimed(db, claim, OPTIONS);
  const second = await processClaimed(db, claim, OPTIONS);
  return [first.outcome, second.outcome];
}

describe("statementHandler()", () => {
  test("`receiveSync()` of a redelivered event whose step skips the gate writes once and answers duplicate", async () => {
    const sent = body("evt_h_gate", "thing.ungated");
    expect(await receiveSync(db, TARGET, verified(sent))).toBe("processed");
    expect(await receiveSync(db, TARGET, verified(sent))).toBe("duplicate");
    expect(await count(db, "marks")).toBe(1);
  });

  test("`receiveSync()` of a redelivered event whose step hides its write behind a block comment writes once and answers duplicate", async () => {
    const sent = body("evt_h_gate_comment", "thing.commented");
    expect(await receiveSync(db, TARGET, verified(sent))).toBe("processed");
    expect(await receiveSync(db, TARGET, verified(sent))).toBe("duplicate");
    expect(await count(db, "marks")).toBe(1);
  });

  test("`receiveSync()` ×8 concurrent deliveries of one event whose step skips the gate write once: one processed, seven duplicates", async () => {
    const actors = connections(fresh.url, 8);
    try {
      await Promise.all(actors.map((a) => a`select 1`));
      const sent = body("evt_h_gate_c", "thing.ungated");
      const outcomes = await Promise.all(actors.map((a) => receiveSync(a, TARGET, verified(sent))));
      expect(outcomes.toSorted()).toEqual([
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

  test("`processClaimed()` of a row already processed, whose step skips the gate, writes nothing and is skipped", async () => {
    expect(await processTwice("evt_h_gate_w", "thing.ungated")).toEqual(["processed", "skipped"]);
    expect(await count(db, "marks")).toBe(1);
  });

  test("`receiveSync()` answers duplicate, not an error, when a redelivery's step hits a unique violation", async () => {
    const first = body("evt_h_strict_1", "thing.strict", "th_strict");
    expect(await receiveSync(db, TARGET, verified(first))).toBe("processed");
    expect(await receiveSync(db, TARGET, verified(first))).toBe("duplicate");
    // A distinct event for the same row is a real failure, not a duplicate: it is thrown (5xx, retried).
    await expect(receiveSync(db, TARGET, verified(body("evt_h_strict_2", "thing.strict", "th_strict")))).rejects.toMatchObject({
      code: "23505",
    });
    expect(await count(db, "webhook_inbox")).toBe(1);
  });

  test("`receiveSync()` and `processClaimed()` run steps named `done` and `inbox`", async () => {
    expect(await receiveSync(db, TARGET, verified(body("evt_h_names_s", "thing.clashing")))).toBe("processed");
    expect(await processTwice("evt_h_names_w", "thing.clashing")).toEqual(["processed", "skipped"]);
    expect([...(await db`select id, state from things order by id`)]).toEqual([
      { id: "evt_h_names_s", state: "inbox" },
      { id: "evt_h_names_w", state: "inbox" },
    ]);
  });

  test("`receiveSync()` refuses an insert then an update of one table in two steps with an error naming the handler, the steps and the table, and records nothing", async () => {
    const refused = receiveSync(db, TARGET, verified(body("evt_h_twice", "thing.twice")));
    await expect(refused).rejects.toThrow('Handler "insertThenUpdate": steps "created" and "settled" both write table things');
    const err = await refused.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HandlerDefinitionError);
    expect(err).not.toBeInstanceOf(PermanentError);
    expect(await count(db, "webhook_inbox")).toBe(0);
    expect(await count(db, "things")).toBe(0);
  });

  test("`receiveSync()` refuses a step that writes without RETURNING, naming the handler and the step, and records nothing", async () => {
    await expect(receiveSync(db, TARGET, verified(body("evt_h_unret", "thing.unreturning")))).rejects.toThrow(
      'Handler "unreturning": step "marked" writes table marks without a RETURNING clause',
    );
    expect(await count(db, "webhook_inbox")).toBe(0);
  });

  test("`processClaimed()` of a row another worker settled, whose steps test the gate, is skipped without an error", async () => {
    const gated = statementHandler("gated", (sql, _object, ctx, { gate }) => ({
      marked: sql`insert into marks (event_id, note) select ${ctx.eventId}::text, 'gated' where ${gate} returning 1`,
    }));
    const options = { ...OPTIONS, handlersFor: () => ({ "thing.gated": gated }) };
    expect(await receiveAsync(db, { ...TARGET, handlers: { "thing.gated": gated } }, verified(body("evt_h_gated", "thing.gated")))).toBe(
      "queued",
    );
    const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
    if (!claim) throw new Error("evt_h_gated was not claimed");
    expect(await processClaimed(db, claim, options)).toEqual({ outcome: "processed" });
    expect(await processClaimed(db, claim, options)).toEqual({ outcome: "skipped" });
    expect(await count(db, "marks")).toBe(1);
  });

  test("`processClaimed()` fails (retried, not parked) a row whose handler writes one table in two steps", async () => {
    expect(await receiveAsync(db, TARGET, verified(body("evt_h_twice_w", "thing.twice")))).toBe("queued");
    const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
    if (!claim) throw new Error("evt_h_twice_w was not claimed");
    const result = await processClaimed(db, claim, OPTIONS);
    expect(result.outcome).toBe("failed");
    expect(result.error).toContain('steps "created" and "settled" both write table things');
    expect(await count(db, "things")).toBe(0);
  });
});

/** Two steps of one shape whatever the event, the second reading the first: its kept SQL text is reused. */
const chained = statementHandler("chained", (sql, object, ctx, { gate, step }) => ({
  created: sql`insert into things (id, state) select ${String(object.id)}::text, 'chained' where ${gate} returning id`,
  marked: sql`insert into marks (event_id, note) select ${ctx.eventId}::text, id from ${step("created")} returning 1`,
}));

describe("statementHandler() kept shapes", () => {
  test("`receiveSync()` binds each delivery's own values when a handler's shape repeats, and a redelivery still writes nothing", async () => {
    const target: ReceiveTarget = { ...TARGET, handlers: { "thing.chained": chained } };
    for (const n of [1, 2, 3])
      expect(await receiveSync(db, target, verified(body(`evt_h_kept_${n}`, "thing.chained", `th_kept_${n}`)))).toBe("processed");
    expect(await receiveSync(db, target, verified(body("evt_h_kept_2", "thing.chained", "th_kept_2")))).toBe("duplicate");
    expect([...(await db`select event_id, note from marks order by event_id`)]).toEqual([
      { event_id: "evt_h_kept_1", note: "th_kept_1" },
      { event_id: "evt_h_kept_2", note: "th_kept_2" },
      { event_id: "evt_h_kept_3", note: "th_kept_3" },
    ]);
    expect(await count(db, "things")).toBe(3);
  });
});

describe("statementHandler() step classification", () => {
  const context = { provider: "stripe", endpoint: "hazards", eventId: "evt_shape", eventType: "thing.shape" };
  /** Renders a handler whose first step is `shape` and whose second plainly writes `marks`: the two-writers rule must name marks. */
  const renderWithSecondWriter = (shape: (sql: Db) => Step) =>
    statementHandler("shapes", (sql) => ({
      first: shape(sql as Db),
      second: sql`insert into marks (event_id) values ('x') returning 1`,
    })).statement?.(db, {}, context);
  const writesOfMarks: [string, (sql: Db) => Step][] = [
    ["a leading block comment", (sql) => sql`/* audit */ insert into marks (event_id) values ('a') returning 1`],
    ["a nested block comment", (sql) => sql`/* a /* b */ insert into x */ insert into marks (event_id) values ('a') returning 1`],
    [
      "a line comment and newlines",
      (sql) => sql`
      -- audit
      insert into marks (event_id) values ('a') returning 1`,
    ],
    ["a comment between the keywords", (sql) => sql`insert /* x */ into marks (event_id) values ('a') returning 1`],
    ["upper case", (sql) => sql`INSERT INTO MARKS (event_id) values ('a') RETURNING 1`],
    ["a quoted table", (sql) => sql`insert into "marks" (event_id) values ('a') returning 1`],
    ["a schema-qualified table", (sql) => sql`insert into public . marks (event_id) values ('a') returning 1`],
    ["a quoted schema-qualified table", (sql) => sql`update "public"."marks" set note = 'n' returning 1`],
    ["update only", (sql) => sql`update only marks set note = 'n' returning 1`],
    ["delete from", (sql) => sql`delete from marks where event_id = 'a' returning 1`],
    [
      "merge into",
      (sql) => sql`merge into marks m using (select 'a' as id) s on m.event_id = s.id when matched then do nothing returning 1`,
    ],
    ["a column list right after the table", (sql) => sql`insert into marks(event_id) values ('a') returning 1`],
    ["a comment before a nested fragment", (sql) => sql`/* c */ ${sql`insert into marks (event_id) values ('a') returning 1`}`],
  ];
  for (const [shape, build] of writesOfMarks) {
    test(`\`statement()\` sees the write of marks behind ${shape}`, () => {
      expect(() => renderWithSecondWriter(build)).toThrow('steps "first" and "second" both write table marks');
    });
  }

  test("`statement()` sees RETURNING only outside comments and string literals", () => {
    const handler = statementHandler("fakeReturning", (sql) => ({
      marked: sql`insert into marks (event_id, note) values ('a', 'returning') -- returning 1`,
    }));
    expect(() => handler.statement?.(db, {}, context)).toThrow('step "marked" writes table marks without a RETURNING clause');
  });

  test("`statement()` reads a select whose text mentions insert in a literal or comment as a read", () => {
    const handler = statementHandler("reads", (sql) => ({
      a: sql`/* insert into marks */ select 'insert into marks' as t`,
      b: sql`(values (1))`,
      c: sql`insert into marks (event_id) values ('a') returning 1`,
    }));
    expect(handler.statement?.(db, {}, context)).toBeDefined();
  });

  const refused: [string, (sql: Db) => Step, string][] = [
    [
      "its own WITH",
      (sql) => sql`with x as (insert into marks (event_id) values ('a') returning 1) select * from x`,
      "starts with its own WITH",
    ],
    ["an unknown first word", (sql) => sql`table marks`, 'starts with "table marks"'],
    [
      "a table given as an identifier value",
      (sql) => sql`insert into ${sql("marks")} (event_id) values ('a') returning 1`,
      "whose table is not written literally",
    ],
    ["a bound value", (sql) => sql`${"x"}`, "starts with a bound value"],
    ["only a comment", (sql) => sql`/* nothing */`, "starts with"],
  ];
  for (const [shape, build, message] of refused) {
    test(`\`statement()\` refuses a step that starts with ${shape}, as a HandlerDefinitionError naming handler and step`, () => {
      const handler = statementHandler("refused", (sql) => ({ odd: build(sql as Db) }));
      let err: unknown;
      try {
        handler.statement?.(db, {}, context);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(HandlerDefinitionError);
      expect(String(err)).toContain('Handler "refused": step "odd" ');
      expect(String(err)).toContain(message);
    });
  }
});
