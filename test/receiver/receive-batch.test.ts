// receiveBatch's invariant (receive.ts recordBatch): a delivery of several events (Adyen's batch) is
// answered [accepted] only once one commit holds every event of it, applied, recorded, queued or parked;
// every other way out is a 4xx/5xx with nothing of the delivery left. Each case below breaks one branch of
// the retries that get it there, and asserts the answer, the outcomes logged and the rows.
import { join } from "node:path";
import { afterAll, beforeEach, expect, test } from "bun:test";
import { readProviderFixtures, signDelivery } from "../../src/dev/provider-delivery.ts";
import { PermanentError } from "../../src/errors.ts";
import { adyenHandlers } from "../../src/handlers/adyen-payments.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { adyenProvider } from "../../src/providers/adyen.ts";
import { createApp } from "../../src/receiver/app.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import { FIXTURES_DIR, freshDatabase } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop(), 20_000);

const KEY = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00";
const batch2 = readProviderFixtures([join(FIXTURES_DIR, "adyen", "batch-2.json")])[0]!;
// batch-2.json holds A then B; in key order B comes first, so A fails after B was held.
const A = "8835073381342287:AUTHORISATION:true";
const B = "7914073381342284:AUTHORISATION:true";

type HandlerFault = "permanent" | "transient";
/** What PostgreSQL does, by a trigger: refuse A's payload (22008), refuse the commit of a processed row, refuse a row recorded with an error, end the session once. */
type DbFault = "row refused" | "commit refused" | "failure record refused" | "unavailable";
/** A row as one word: processed, queued (attempts 0), retrying (attempts 1, its error), parked (needs-review), raw (parked, only its raw body). */
type RowState = "processed" | "queued" | "retrying" | "parked" | "raw";

const TRIGGERS: Record<DbFault, string> = {
  "row refused": `
    create function fault() returns trigger language plpgsql as $$ begin
      if new.event_id = '${A}' and new.payload is not null then raise exception 'out of range' using errcode = '22008'; end if;
      return new; end $$;
    create trigger fault before insert on webhook_inbox_payloads for each row execute function fault();`,
  "commit refused": `
    create function fault() returns trigger language plpgsql as $$ begin raise exception 'refused at commit'; end $$;
    create constraint trigger fault after insert on webhook_inbox deferrable initially deferred
      for each row when (new.outcome = 'processed') execute function fault();`,
  "failure record refused": `
    create function fault() returns trigger language plpgsql as $$ begin raise exception 'refused failure record'; end $$;
    create trigger fault before insert on webhook_inbox for each row when (new.last_error is not null) execute function fault();`,
  // Once (a sequence is not rolled back): a fallback on a new session would succeed.
  unavailable: `
    create sequence fault_once;
    create function fault() returns trigger language plpgsql as $$ begin
      if nextval('fault_once') = 1 then perform pg_terminate_backend(pg_backend_pid()); perform pg_sleep(5); end if;
      return new; end $$;
    create trigger fault before insert on webhook_inbox for each row execute function fault();`,
};

/** Books AUTHORISATION as Adyen's handlers do, and fails for item A as `fault` says. */
function handlersFailing(fault: HandlerFault | undefined): HandlerTable {
  return {
    AUTHORISATION: async (tx, item, context) => {
      await adyenHandlers.AUTHORISATION!(tx, item, context);
      if (context.eventId !== A || !fault) return;
      throw fault === "permanent" ? new PermanentError("Cannot book: test refuses A") : new Error("transient: test fails A");
    },
  };
}

beforeEach(async () => {
  await db.unsafe(`
    drop trigger if exists fault on webhook_inbox; drop trigger if exists fault on webhook_inbox_payloads; drop function if exists fault(); drop sequence if exists fault_once;
    truncate webhook_inbox, webhook_inbox_payloads, outbox restart identity`);
});

/** Delivers batch-2.json (A's pspReference holding a NUL when `nulKey`) to an Adyen endpoint in `mode`. */
async function deliver(mode: Mode, fault: { handler?: HandlerFault; db?: DbFault; nulKey?: boolean }) {
  if (fault.db) await db.unsafe(TRIGGERS[fault.db]);
  const logged: Record<string, unknown>[] = [];
  const handlers = handlersFailing(fault.handler);
  const endpoints = [{ name: "pay", provider: adyenProvider, secrets: [KEY], handlers, isDefault: true, mode }];
  const app = createApp({ db, endpoints, log: (line) => logged.push(line as Record<string, unknown>) });
  const body = fault.nulKey ? batch2.body.replace('"8835073381342287"', '"8835073381\\u0000342287"') : batch2.body;
  const signed = await signDelivery("adyen", { ...batch2, body }, KEY, 0);
  const res = await app.fetch(new Request("http://receiver.test/webhooks/adyen", { method: "POST", ...signed }));
  const text = await res.text();
  await db.unsafe("drop trigger if exists fault on webhook_inbox; drop trigger if exists fault on webhook_inbox_payloads");
  const rows = await db<{ event_id: string; state: RowState }[]>`
    select w.event_id,
           case when w.outcome is not null then w.outcome
                when w.needs_review_at is not null and p.payload is null and p.raw_body is not null then 'raw'
                when w.needs_review_at is not null then 'parked'
                when w.attempts = 1 and w.last_error is not null then 'retrying'
                when w.attempts = 0 then 'queued' end as state
      from webhook_inbox w
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)`;
  const delivery = logged.find((l) => l.message === "delivery");
  return {
    status: res.status,
    answer: res.status === 200 ? text : (JSON.parse(text) as { error: string }).error,
    outcomes: delivery?.outcomes,
    rows: Object.fromEntries(rows.map((r) => [r.event_id === A ? "A" : "B", r.state])),
    outbox: (await db<{ n: number }[]>`select count(*)::int as n from outbox`)[0]?.n,
  };
}

const accepted = (outcomes: string[], rows: Record<string, RowState>, outbox = 0) => ({
  status: 200,
  answer: "[accepted]",
  outcomes,
  rows,
  outbox,
});
const refused = (status: number, answer: string) => ({ status, answer, outcomes: undefined, rows: {}, outbox: 0 });

test.each([
  ["sync", "nothing fails: both applied in one try", {}, accepted(["processed", "processed"], { A: "processed", B: "processed" }, 2)],
  ["hybrid", "nothing fails: both applied in one try", {}, accepted(["processed", "processed"], { A: "processed", B: "processed" }, 2)],
  ["async", "nothing fails: both queued by one statement", {}, accepted(["queued", "queued"], { A: "queued", B: "queued" })],
  [
    "sync",
    "a permanent handler failure parks its event, the other applied",
    { handler: "permanent" },
    accepted(["needs_review", "processed"], { A: "parked", B: "processed" }, 1),
  ],
  ["sync", "a transient handler failure refuses the delivery, nothing kept", { handler: "transient" }, refused(500, "processing_failed")],
  [
    "hybrid",
    "a transient handler failure records both for the worker, the failed one with its error",
    { handler: "transient" },
    accepted(["queued", "queued"], { A: "retrying", B: "queued" }),
  ],
  [
    "hybrid",
    "a permanent handler failure parks its event, the other queued",
    { handler: "permanent" },
    accepted(["needs_review", "queued"], { A: "parked", B: "queued" }),
  ],
  [
    "sync",
    "a failure naming no event (the commit refused) refuses the delivery",
    { db: "commit refused" },
    refused(500, "processing_failed"),
  ],
  [
    "hybrid",
    "a failure naming no event (the commit refused) records each event with its error",
    { db: "commit refused" },
    accepted(["queued", "queued"], { A: "retrying", B: "retrying" }),
  ],
  [
    "sync",
    "the parked record refused too: refused, nothing kept",
    { handler: "permanent", db: "failure record refused" },
    refused(500, "processing_failed"),
  ],
  [
    "hybrid",
    "the fallback record refused too: refused, nothing kept",
    { handler: "transient", db: "failure record refused" },
    refused(500, "processing_failed"),
  ],
  [
    "sync",
    "a row PostgreSQL refuses is kept raw, parked, the other applied",
    { db: "row refused" },
    accepted(["needs_review", "processed"], { A: "raw", B: "processed" }, 1),
  ],
  [
    "hybrid",
    "a row PostgreSQL refuses is kept raw, parked, the other queued",
    { db: "row refused" },
    accepted(["needs_review", "queued"], { A: "raw", B: "queued" }),
  ],
  [
    "async",
    "a row PostgreSQL refuses is kept raw, parked, the other queued",
    { db: "row refused" },
    accepted(["needs_review", "queued"], { A: "raw", B: "queued" }),
  ],
  ["sync", "a key PostgreSQL refuses (a NUL in the id) refuses the delivery, 400", { nulKey: true }, refused(400, "invalid_event")],
  ["hybrid", "a key PostgreSQL refuses (a NUL in the id) refuses the delivery, 400", { nulKey: true }, refused(400, "invalid_event")],
  ["async", "a key PostgreSQL refuses (a NUL in the id) refuses the delivery, 400", { nulKey: true }, refused(400, "invalid_event")],
  ["sync", "the database unavailable (its session ended): 503, nothing kept", { db: "unavailable" }, refused(503, "database_unavailable")],
  [
    "hybrid",
    "the database unavailable (its session ended): 503, no fallback on another session",
    { db: "unavailable" },
    refused(503, "database_unavailable"),
  ],
  ["async", "the database unavailable (its session ended): 503, nothing kept", { db: "unavailable" }, refused(503, "database_unavailable")],
] as const)("`receiveBatch()` in %s mode: %s", async (mode, _why, fault, expected) => {
  expect(await deliver(mode, fault)).toEqual(expected);
});

test("`receiveBatch()` answers a redelivery of a batch whose item was kept raw `duplicate` for both items, writing nothing more", async () => {
  await deliver("sync", { db: "row refused" });
  expect(await deliver("sync", {})).toEqual(accepted(["duplicate", "duplicate"], { A: "raw", B: "processed" }, 1));
  expect((await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox_payloads`)[0]?.n).toBe(2);
});
