// Adyen: each item of a batch verified on its own HMAC (Adyen's published test vector included), one bad
// item refusing the delivery, and the delivery contract: a batch's items recorded (and applied) in one
// transaction, answered `[accepted]` only after the commit, with test/fixtures/adyen/.
import { join } from "node:path";
import { afterAll, describe, expect, test } from "bun:test";
import { readProviderFixtures, signDelivery } from "../../src/dev/provider-delivery.ts";
import { AppError } from "../../src/errors.ts";
import { adyenHandlers } from "../../src/handlers/adyen-payments.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { adyenProvider, adyenSigningString, signAdyenItem } from "../../src/providers/adyen.ts";
import { providerNamed } from "../../src/providers/registry.ts";
import { createApp } from "../../src/receiver/app.ts";
import { PermanentError } from "../../src/errors.ts";
import { FIXTURES_DIR, freshDatabase } from "../support/helpers.ts";
import { outboxRows, providerDeliverySuite } from "./provider-delivery-suite.ts";

// Adyen's PHP library test (tests/Adyen/Util/HmacSignatureTest.php, testNotificationRequestItemHmac).
const VECTOR_KEY = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00";
const VECTOR_ITEM = {
  pspReference: "7914073381342284",
  merchantAccountCode: "TestMerchant",
  merchantReference: "TestPayment-1407325143704",
  amount: { value: 1130, currency: "EUR" },
  eventCode: "AUTHORISATION",
  success: "true",
};
const SECRETS = [VECTOR_KEY, "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"] as const;
const fixtures = readProviderFixtures([join(FIXTURES_DIR, "adyen")]);
const nowMs = Date.now();
const verifyAll = (body: string, secrets: readonly string[] = [SECRETS[0]]) =>
  adyenProvider.verifyAll!({ body, headers: new Headers(), secrets, toleranceSec: 300, nowMs });
const refusedWith = async (run: Promise<unknown>) => {
  const err = await run.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  return (err as AppError).code;
};
const batch = (...items: Record<string, unknown>[]) =>
  JSON.stringify({ live: "false", notificationItems: items.map((NotificationRequestItem) => ({ NotificationRequestItem })) });

describe("adyen provider", () => {
  test("`providerNamed()` finds the provider by the name its rows are stored under", () => {
    expect(providerNamed("adyen")).toBe(adyenProvider);
  });

  test("`signAdyenItem()` gives Adyen's published test vector, over pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success", async () => {
    expect(adyenSigningString(VECTOR_ITEM)).toBe("7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true");
    const signed = await signAdyenItem(VECTOR_ITEM, VECTOR_KEY);
    expect((signed.additionalData as { hmacSignature: string }).hmacSignature).toBe("Ny9gS2veKo5E4w8/OL6xz1/wvT/hYkAXy1xNc/QvO4I=");
  });

  test("`verifyAll()` returns one event per item: id <psp>:<eventCode>:<success>, type eventCode, subject keyed by originalReference else pspReference", async () => {
    const capture = {
      ...VECTOR_ITEM,
      pspReference: "8825073381342286",
      originalReference: "7914073381342284",
      eventCode: "CAPTURE",
      eventDate: "2024-04-12T10:21:40+02:00",
    };
    const events = await verifyAll(batch(await signAdyenItem(VECTOR_ITEM, VECTOR_KEY), await signAdyenItem(capture, VECTOR_KEY)));
    expect(events.map((e) => ({ id: e.id, type: e.type, key: e.subject.key, livemode: e.livemode }))).toEqual([
      { id: "7914073381342284:AUTHORISATION:true", type: "AUTHORISATION", key: "7914073381342284", livemode: false },
      { id: "8825073381342286:CAPTURE:true", type: "CAPTURE", key: "7914073381342284", livemode: false },
    ]);
    expect(events[1]?.createdAt).toBeUndefined(); // eventDate is not signed: undated, keyed by the id alone
    expect(adyenProvider.subject(events[1]!.payload)).toEqual(events[1]!.subject);
  });

  test("`verifyAll()` accepts an item signed with the second HMAC key of a rotation", async () => {
    const events = await verifyAll(batch(await signAdyenItem(VECTOR_ITEM, SECRETS[1])), SECRETS);
    expect(events.map((e) => e.id)).toEqual(["7914073381342284:AUTHORISATION:true"]);
  });

  test("`verifyAll()` refuses the whole batch when one item is tampered, unsigned, malformed or signed with another key", async () => {
    const good = await signAdyenItem(VECTOR_ITEM, VECTOR_KEY);
    const other = await signAdyenItem({ ...VECTOR_ITEM, pspReference: "8835073381342287" }, VECTOR_KEY);
    expect(await refusedWith(verifyAll(batch(good, { ...other, amount: { value: 1, currency: "EUR" } })))).toBe("signature_mismatch");
    expect(await refusedWith(verifyAll(batch(good, await signAdyenItem(VECTOR_ITEM, SECRETS[1]))))).toBe("signature_mismatch");
    expect(await refusedWith(verifyAll(batch(good, { ...VECTOR_ITEM, pspReference: "8835073381342287" })))).toBe("signature_missing");
    expect(await refusedWith(verifyAll(batch(good, { ...other, additionalData: { hmacSignature: "bm90IDMyIGJ5dGVz" } })))).toBe(
      "signature_malformed",
    );
  });

  test("`verifyAll()` refuses a body that is not an Adyen notification as invalid_event", async () => {
    const good = await signAdyenItem(VECTOR_ITEM, VECTOR_KEY);
    for (const body of [
      "not json",
      JSON.stringify({ live: "false", notificationItems: [] }),
      JSON.stringify({ live: false, notificationItems: [{ NotificationRequestItem: good }] }),
      JSON.stringify({ live: "false", notificationItems: [{ Item: good }] }),
      batch({ ...good, success: true }),
    ])
      expect(await refusedWith(verifyAll(body))).toBe("invalid_event");
  });

  test("`verify()` takes a one-item delivery and refuses a batch; `subject()` throws PermanentError without an item; secrets must be hex", async () => {
    const one = await signAdyenItem(VECTOR_ITEM, VECTOR_KEY);
    const input = { headers: new Headers(), secrets: [VECTOR_KEY], toleranceSec: 300, nowMs };
    expect((await adyenProvider.verify({ ...input, body: batch(one) })).id).toBe("7914073381342284:AUTHORISATION:true");
    expect(await refusedWith(adyenProvider.verify({ ...input, body: batch(one, one) }))).toBe("invalid_event");
    expect(() => adyenProvider.subject({ live: "false" })).toThrow(PermanentError);
    expect(adyenProvider.secretProblem?.(VECTOR_KEY)).toBeUndefined();
    expect(adyenProvider.secretProblem?.("whsec_not_hex_0123456789abcdef0123")).toContain("not an Adyen HMAC key");
  });
});

const authorised = (psp: string, amount: number, currency: string, reference: string) => ({
  aggregate_type: "AdyenPayment",
  aggregate_id: psp,
  event_type: "AdyenPaymentAuthorised",
  payload: {
    amount,
    currency,
    event_id: `${psp}:AUTHORISATION:true`,
    psp_reference: psp,
    merchant_account: "TestMerchant",
    merchant_reference: reference,
  },
});

providerDeliverySuite({
  provider: adyenProvider,
  signer: "adyen",
  handlers: adyenHandlers,
  secrets: SECRETS,
  fixtures,
  acceptedBody: "[accepted]",
  inbox: {
    "7914073381342284:AUTHORISATION:true": "processed",
    "8815073381342285:AUTHORISATION:false": "processed",
    "8825073381342286:CAPTURE:true": "ignored",
    "8835073381342287:AUTHORISATION:true": "processed",
    "8845073381342288:AUTHORISATION:true": "processed",
  },
  endState: outboxRows,
  expected: [
    authorised("7914073381342284", 1130, "EUR", "TestPayment-1407325143704"),
    authorised("8835073381342287", 4999, "USD", "Order-20240412-0042"),
    authorised("8845073381342288", 120, "GBP", "Order-20240412-0043"),
  ],
  bad: (signed) => {
    const tampered = JSON.parse(signed.body) as { notificationItems: { NotificationRequestItem: { amount: { value: number } } }[] };
    (tampered.notificationItems[2] as (typeof tampered.notificationItems)[0]).NotificationRequestItem.amount.value = 1;
    return [
      { why: "the last item of three tampered", delivery: { ...signed, body: JSON.stringify(tampered) }, code: "signature_mismatch" },
      { why: "not a notification", delivery: { ...signed, body: "{}" }, code: "invalid_event" },
    ];
  },
});

describe("adyen batch in one transaction", () => {
  const fresh = freshDatabaseOnce();
  /** Books AUTHORISATION like the example, and fails permanently for the pspReference given. */
  const failingFor = (psp: string): HandlerTable => ({
    AUTHORISATION: async (tx, item, context) => {
      if (item.pspReference === psp) throw new PermanentError("Cannot book: test refuses this item");
      await adyenHandlers.AUTHORISATION!(tx, item, context);
    },
  });
  const deliverBatch2 = async (mode: "sync" | "hybrid", handlers: HandlerTable) => {
    const { db } = await fresh();
    await db`truncate webhook_inbox, webhook_inbox_payloads, outbox restart identity`;
    const app = createApp({
      db,
      endpoints: [{ name: "pay", provider: adyenProvider, secrets: SECRETS, handlers, isDefault: true, mode }],
      log: () => {},
    });
    const signed = await signDelivery(
      "adyen",
      fixtures.find((f) => f.name === "batch-2.json")!,
      VECTOR_KEY,
      0,
    );
    const res = await app.fetch(
      new Request("http://receiver.test/webhooks/adyen", { method: "POST", headers: signed.headers, body: signed.body }),
    );
    const rows = await db`select event_id, outcome, needs_review_at is not null as parked from webhook_inbox order by event_id`;
    return { status: res.status, text: await res.text(), rows: [...rows], outbox: (await outboxRows(db)).length };
  };

  test("sync: a permanently failing item is recorded needs-review and the others applied, in one transaction, answered [accepted]", async () => {
    expect(await deliverBatch2("sync", failingFor("8835073381342287"))).toEqual({
      status: 200,
      text: "[accepted]",
      rows: [
        { event_id: "7914073381342284:AUTHORISATION:true", outcome: "processed", parked: false },
        { event_id: "8835073381342287:AUTHORISATION:true", outcome: null, parked: true },
      ],
      outbox: 1,
    });
  });

  test("sync: a transient failure of one item rolls back every item (500, nothing recorded), so Adyen retries the whole delivery", async () => {
    const flaky: HandlerTable = {
      AUTHORISATION: async (tx, item, context) => {
        await adyenHandlers.AUTHORISATION!(tx, item, context);
        if (item.pspReference === "8835073381342287") throw new Error("transient");
      },
    };
    expect(await deliverBatch2("sync", flaky)).toEqual({
      status: 500,
      text: expect.stringContaining("processing_failed") as never,
      rows: [],
      outbox: 0,
    });
  });

  test("hybrid: when the in-request attempt fails, every item is recorded for the worker in one transaction (the failing one with its error)", async () => {
    const flaky: HandlerTable = {
      AUTHORISATION: async (tx, item, context) => {
        await adyenHandlers.AUTHORISATION!(tx, item, context);
        if (item.pspReference === "8835073381342287") throw new Error("transient");
      },
    };
    const result = await deliverBatch2("hybrid", flaky);
    expect(result).toEqual({
      status: 200,
      text: "[accepted]",
      rows: [
        { event_id: "7914073381342284:AUTHORISATION:true", outcome: null, parked: false },
        { event_id: "8835073381342287:AUTHORISATION:true", outcome: null, parked: false },
      ],
      outbox: 0,
    });
    const { db } = await fresh();
    const [failed] = await db`select attempts, last_error from webhook_inbox where event_id = '8835073381342287:AUTHORISATION:true'`;
    expect({ attempts: failed?.attempts, transient: String(failed?.last_error).includes("transient") }).toEqual({
      attempts: 1,
      transient: true,
    });
  });
});

describe("adyen batch holding an item PostgreSQL cannot store", () => {
  const fresh = freshDatabaseOnce();
  // eventDate is not signed (adyenSigningString), so this item stays validly signed with another value. No
  // item of Adyen's is unstorable by itself any more (its eventDate is not converted), so a trigger stands
  // in for PostgreSQL refusing it: a data error (SQLSTATE 22008) for any payload row holding that payload
  // (payloads live in webhook_inbox_payloads, written in the statement that writes the state row: sql/0027).
  const farPast = (body: string) => body.replace('"2024-04-12T11:02:13+02:00"', '"-100000-01-01T00:00:00Z"');
  const UNSTORABLE = "8835073381342287:AUTHORISATION:true";
  const deliver = async (mode: "sync" | "hybrid" | "async") => {
    const { db } = await fresh();
    await db`truncate webhook_inbox, webhook_inbox_payloads, outbox restart identity`;
    await db.unsafe(`
      create or replace function refuse_far_past() returns trigger language plpgsql as $$
      begin
        if new.payload::text like '%-100000-01-01%' then
          raise exception 'date/time field value out of range' using errcode = '22008';
        end if;
        return new;
      end $$;
      create or replace trigger refuse_far_past before insert on webhook_inbox_payloads for each row execute function refuse_far_past();
    `);
    const app = createApp({
      db,
      endpoints: [{ name: "pay", provider: adyenProvider, secrets: SECRETS, handlers: adyenHandlers, isDefault: true, mode }],
      log: () => {},
    });
    const signed = await signDelivery(
      "adyen",
      fixtures.find((f) => f.name === "batch-2.json")!,
      VECTOR_KEY,
      0,
    );
    expect(farPast(signed.body)).not.toBe(signed.body);
    const res = await app.fetch(
      new Request("http://receiver.test/webhooks/adyen", { method: "POST", headers: signed.headers, body: farPast(signed.body) }),
    );
    const rows = await db`
      select w.event_id, w.outcome, w.needs_review_at is not null as parked, p.received_at is not null as kept, p.payload is null as no_payload,
             coalesce(p.raw_body like '%-100000-01-01T00:00:00Z%', false) as raw_kept,
             coalesce(w.last_error like '%22008%', false) as says_why
        from webhook_inbox w
        left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
       order by w.event_id`;
    return { status: res.status, text: await res.text(), rows: [...rows], outbox: (await outboxRows(db)).length };
  };
  const parkedRaw = { event_id: UNSTORABLE, outcome: null, parked: true, kept: true, no_payload: true, raw_kept: true, says_why: true };
  const other = (outcome: string | null) => ({
    event_id: "7914073381342284:AUTHORISATION:true",
    outcome,
    parked: false,
    kept: true,
    no_payload: false,
    raw_kept: false,
    says_why: false,
  });

  test("sync: the item is kept as its raw body, parked needs-review, the other applied, answered [accepted]", async () => {
    expect(await deliver("sync")).toEqual({ status: 200, text: "[accepted]", rows: [other("processed"), parkedRaw], outbox: 1 });
  });

  test("hybrid: the item is kept as its raw body, parked, the other queued for the worker as hybrid's fallback does, answered [accepted]", async () => {
    expect(await deliver("hybrid")).toEqual({ status: 200, text: "[accepted]", rows: [other(null), parkedRaw], outbox: 0 });
  });

  test("async: the item is kept as its raw body, parked, the other queued for the worker, answered [accepted]", async () => {
    expect(await deliver("async")).toEqual({ status: 200, text: "[accepted]", rows: [other(null), parkedRaw], outbox: 0 });
  });

  test("a redelivery of that batch is a duplicate for both items: nothing more is written", async () => {
    await deliver("sync");
    const { db } = await fresh();
    const app = createApp({
      db,
      endpoints: [{ name: "pay", provider: adyenProvider, secrets: SECRETS, handlers: adyenHandlers, isDefault: true, mode: "sync" }],
      log: () => {},
    });
    const signed = await signDelivery(
      "adyen",
      fixtures.find((f) => f.name === "batch-2.json")!,
      VECTOR_KEY,
      0,
    );
    const res = await app.fetch(
      new Request("http://receiver.test/webhooks/adyen", { method: "POST", headers: signed.headers, body: farPast(signed.body) }),
    );
    expect({
      status: res.status,
      text: await res.text(),
      rows: (await db`select count(*)::int as n from webhook_inbox`)[0]?.n,
      payloads: (await db`select count(*)::int as n from webhook_inbox_payloads`)[0]?.n,
      outbox: (await outboxRows(db)).length,
    }).toEqual({
      status: 200,
      text: "[accepted]",
      rows: 2,
      payloads: 2,
      outbox: 1,
    });
  });
});

/** One database for the describe block above, created on first use and dropped after the file. */
function freshDatabaseOnce() {
  let made: ReturnType<typeof freshDatabase> | undefined;
  afterAll(async () => {
    if (made) await (await made).drop();
  });
  return () => (made ??= freshDatabase());
}
