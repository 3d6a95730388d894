// Adyen: each item of a batch verified on its own HMAC (Adyen's published test vector included), one bad
// item refusing the delivery, and the delivery contract: a batch's items recorded (and applied) in one
// transaction, answered `[accepted]` only after the commit, with test/fixtures/adyen/.
import { join } from "node:path";
import { describe, expect, test } from "bun:test";
import { readProviderFixtures } from "../../src/dev/provider-delivery.ts";
import { AppError, errorResponse } from "../../src/errors.ts";
import { adyenHandlers } from "../../src/handlers/adyen-payments.ts";
import { adyenProvider, adyenSigningString, signAdyenItem } from "../../src/providers/adyen.ts";
import { providerNamed } from "../../src/providers/registry.ts";
import { PermanentError } from "../../src/errors.ts";
import { FIXTURES_DIR } from "../support/helpers.ts";
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

  test("`verifyAll()` answers an item signed with another key the same whatever the number of HMAC keys configured (the trial's N11)", async () => {
    const body = batch(await signAdyenItem(VECTOR_ITEM, SECRETS[1]));
    const answer = (secrets: readonly string[]) =>
      verifyAll(body, secrets).then(
        () => "accepted",
        (e: unknown) => errorResponse(e as AppError).text(),
      );
    const one = await answer([VECTOR_KEY]);
    expect(one).toBe(
      '{"error":"signature_mismatch","message":"Cannot verify Adyen HMAC signature of notificationItems[0]: it does not match; nothing of the delivery was recorded"}',
    );
    expect(await answer([VECTOR_KEY, VECTOR_KEY, VECTOR_KEY])).toBe(one);
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

// A batch's failures (a handler's, a row or a key PostgreSQL refuses, the database gone) in each mode:
// test/receiver/receive-batch.test.ts.
