// Bad input, generated: fast-check properties (fixed seed, bounded runs) through `createApp().fetch()`
// against a real database. Unverified input must be a 4xx with a known code and write nothing; a
// verified event a handler cannot apply must be parked as needs-review (200); nothing may be a 5xx,
// and no response or log line may echo the secret or the signature header.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { ErrorCode } from "../../src/errors.ts";
import { signStripePayload } from "../../src/providers/stripe.ts";
import { count, eventBody, fixture, freshDatabase, invoice, SECRET } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

const URL_DEFAULT = "http://receiver.test/webhooks/stripe";
// A fixed clock: every signature is made relative to it.
const NOW_SEC = 1_764_470_000;
const SEED = 20_251_130;
/** fast-check settings: the same inputs on every run, a bounded number of them. */
const runs = (numRuns: number) => ({ seed: SEED, numRuns });
/** Per-test limit for the properties (a bound; each takes a second or two). */
const PROPERTY_MS = 30_000;

const CREATED = fixture("01_invoice.created_evt_1SkB1aLgUG5tbmjc0created.json");
const VALID_HEADER = await signStripePayload(CREATED, SECRET, NOW_SEC);
const VALID_V1 = VALID_HEADER.slice(VALID_HEADER.indexOf("v1=") + 3);

/** Every 4xx code of src/errors.ts that input rejected before recording can get. */
const REJECTED: readonly ErrorCode[] = [
  "signature_missing",
  "signature_malformed",
  "signature_mismatch",
  "timestamp_out_of_tolerance",
  "invalid_body",
  "invalid_event",
  "payload_too_large",
];
const SIGNATURE_CODES: readonly ErrorCode[] = [
  "signature_missing",
  "signature_malformed",
  "signature_mismatch",
  "timestamp_out_of_tolerance",
];

const logged: string[] = [];
/** One app for the whole file: after every property it must still serve. */
const app = createApp({
  db,
  endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]),
  now: () => NOW_SEC * 1000,
  log: (line) => logged.push(JSON.stringify(line)),
});

interface Reply {
  status: number;
  text: string;
  body: { outcome?: string; event_id?: string; error?: string; message?: string };
  /** The app's log line for this request. */
  log: string;
}

/** A POST of `body` with `signature` as Stripe-Signature (no header when null). */
function post(body: string | Uint8Array<ArrayBuffer>, signature: string | null): Request {
  const headers: Record<string, string> = { "content-type": "application/json; charset=utf-8" };
  if (signature !== null) headers["stripe-signature"] = signature;
  return new Request(URL_DEFAULT, { method: "POST", headers, body });
}

async function send(request: Request): Promise<Reply> {
  const header = request.headers.get("stripe-signature");
  logged.length = 0;
  const response = await app.fetch(request);
  const text = await response.text();
  const reply: Reply = { status: response.status, text, body: JSON.parse(text) as Reply["body"], log: logged.join("\n") };
  expectNoEcho(reply, header);
  return reply;
}

/** Neither the response nor the log line holds the secret, the signature header or a signature in it. */
function expectNoEcho(reply: Reply, header: string | null): void {
  const forbidden = [SECRET, VALID_V1];
  if (header !== null) {
    // Short fragments ("t=", "v1") may occur in any message; a header or value of 12+ characters may not.
    if (header.length >= 12) forbidden.push(header, JSON.stringify(header).slice(1, -1));
    for (const part of header.split(",")) {
      const value = part.slice(part.indexOf("=") + 1);
      if (value.length >= 12) forbidden.push(value);
    }
  }
  for (const text of [reply.text, reply.log]) {
    for (const f of forbidden) expect(text).not.toContain(f);
  }
}

/** Rows in the inbox and every business table, in one round trip. */
async function rowCount(): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    select ((select count(*) from webhook_inbox) + (select count(*) from invoices)
          + (select count(*) from ledger_entries) + (select count(*) from outbox))::int as n
  `;
  return row?.n ?? -1;
}

/** A 400 `{ error, message }` with one of `codes` (all 400s), and nothing written. */
async function expectRejected(reply: Reply, codes: readonly ErrorCode[]): Promise<void> {
  for (const code of codes) expect(REJECTED).toContain(code);
  const rows = await rowCount();
  // Emptied at once, so that fast-check's shrinking runs after a failure start from an empty database.
  if (rows !== 0) await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
  const error = reply.body.error ?? "";
  const seen = { status: reply.status, error, keys: Object.keys(reply.body).sort(), rows };
  expect(seen).toEqual({
    status: 400,
    error: codes.includes(error as ErrorCode) ? error : `one of ${codes.join(", ")}`,
    keys: ["error", "message"],
    rows: 0,
  });
}

function signed(body: string): Promise<Request> {
  return signStripePayload(body, SECRET, NOW_SEC).then((header) => post(body, header));
}

// ---- generators -------------------------------------------------------------------------------

/** A character a header value can hold (printable ASCII, sometimes a tab or a Latin-1 letter). */
const headerChar = fc.oneof(
  { weight: 30, arbitrary: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) },
  { weight: 1, arbitrary: fc.constantFrom("\t", "\u00e9", "\u00ff") },
);
/** A character of one header item's key or value: no comma, no whitespace. */
const tokenChar = headerChar.filter((c) => c !== "," && c.trim() !== "");
const hex = (minLength: number, maxLength: number) => fc.string({ unit: fc.constantFrom(..."0123456789abcdef"), minLength, maxLength });

const headerItem = fc.oneof(
  fc.constant(`t=${NOW_SEC}`),
  fc.integer({ min: -1, max: 99_999_999_999 }).map((n) => `t=${n}`),
  hex(0, 80).map((h) => `v1=${h}`),
  fc.string({ unit: tokenChar, maxLength: 70 }).map((s) => `v1=${s}`),
  fc.tuple(fc.string({ unit: tokenChar, maxLength: 4 }), fc.string({ unit: tokenChar, maxLength: 20 })).map(([k, v]) => `${k}=${v}`),
  fc.string({ unit: headerChar, maxLength: 30 }),
);
const randomHeader = fc.oneof(
  fc.string({ unit: headerChar, maxLength: 200 }),
  fc.array(headerItem, { maxLength: 8 }).map((items) => items.join(",")),
);

/** A Stripe event as the verifier's contract defines it (src/providers/stripe.ts `verifyStripeEvent`). */
function isStripeEvent(value: unknown): boolean {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const e = value as Record<string, unknown>;
  const data = e.data as Record<string, unknown> | null | undefined;
  return (
    e.object === "event" &&
    typeof e.id === "string" &&
    /^evt_[A-Za-z0-9_]{1,250}$/.test(e.id) &&
    typeof e.type === "string" &&
    e.type.length > 0 &&
    e.type.length <= 200 &&
    typeof data === "object" &&
    data !== null &&
    typeof data.object === "object" &&
    data.object !== null &&
    !Array.isArray(data.object)
  );
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
/** The exact text of `bytes`, or null when they are not UTF-8. */
function exactText(bytes: Uint8Array): string | null {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}
function parsed(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

// ---- unverified input: 4xx, nothing written --------------------------------------------------

describe("unverified input", () => {
  test(
    "`createApp()` answers 400 with a signature code and writes nothing for random Stripe-Signature headers",
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.option(randomHeader, { nil: null }), async (header) => {
          await expectRejected(await send(post(CREATED, header)), SIGNATURE_CODES);
        }),
        runs(200),
      );
    },
    PROPERTY_MS,
  );

  test(
    "`createApp()` refuses a valid Stripe-Signature header truncated at every position, from either end",
    async () => {
      const v1Start = VALID_HEADER.indexOf(",v1=") + 4;
      expect(v1Start).toBeGreaterThan(4);
      for (let length = 0; length < VALID_HEADER.length; length++) {
        const reply = await send(post(CREATED, VALID_HEADER.slice(0, length)));
        const expected: ErrorCode = length === 0 ? "signature_missing" : length > v1Start ? "signature_mismatch" : "signature_malformed";
        await expectRejected(reply, [expected]);
      }
      for (let cut = 1; cut < VALID_HEADER.length; cut++) {
        await expectRejected(await send(post(CREATED, VALID_HEADER.slice(cut))), ["signature_malformed"]);
      }
      // The whole header is accepted: the truncation, not the body or the clock, made each one fail.
      const whole = await send(post(CREATED, VALID_HEADER));
      expect([whole.status, whole.body.outcome]).toEqual([200, "processed"]);
    },
    PROPERTY_MS,
  );

  test(
    "`createApp()` answers 400 signature_malformed for a valid signature under a scheme other than v1",
    async () => {
      const scheme = fc.constantFrom("v0", "v2", "V1", "v1 ", "v01", "v", "1", "vl", "v1_", "sig", "v1.0", "v1\t");
      await fc.assert(
        fc.asyncProperty(fc.array(scheme, { minLength: 1, maxLength: 3 }), fc.boolean(), async (schemes, timestampFirst) => {
          const signatures = schemes.map((s) => `${s}=${VALID_V1}`);
          const header = (timestampFirst ? [`t=${NOW_SEC}`, ...signatures] : [...signatures, `t=${NOW_SEC}`]).join(",");
          await expectRejected(await send(post(CREATED, header)), ["signature_malformed"]);
        }),
        runs(100),
      );
    },
    PROPERTY_MS,
  );

  test(
    "`createApp()` answers 400 signature_malformed for a valid signature with more than one t=",
    async () => {
      const otherTimestamp = fc.oneof(fc.constant(NOW_SEC), fc.integer({ min: 0, max: 9_999_999_999 }));
      await fc.assert(
        fc.asyncProperty(fc.array(otherTimestamp, { minLength: 1, maxLength: 3 }), fc.nat(), async (others, position) => {
          const items = [`t=${NOW_SEC}`, ...others.map((t) => `t=${t}`)];
          items.splice(position % (items.length + 1), 0, `v1=${VALID_V1}`);
          await expectRejected(await send(post(CREATED, items.join(","))), ["signature_malformed"]);
        }),
        runs(100),
      );
    },
    PROPERTY_MS,
  );

  test(
    "`createApp()` answers 400 signature_mismatch for v1 values that are not hex, not 64 long, or one character off",
    async () => {
      const flipped = fc
        .tuple(fc.nat({ max: 63 }), fc.constantFrom(..."0123456789abcdefgzG!_-+/=."))
        .map(([i, c]) => VALID_V1.slice(0, i) + c + VALID_V1.slice(i + 1));
      const bad = fc
        .oneof(
          hex(1, 128).filter((h) => h.length !== 64),
          hex(64, 64),
          flipped,
          // Not `${VALID_V1}=…`: Stripe's parser splits items at every "=", so it reads that as the valid signature.
          fc.constantFrom(VALID_V1.toUpperCase(), `${VALID_V1}0`, VALID_V1.slice(1), VALID_V1.slice(0, 63), `=${VALID_V1}`),
          fc.string({ unit: tokenChar, minLength: 1, maxLength: 100 }),
        )
        .filter((v) => v !== VALID_V1);
      await fc.assert(
        fc.asyncProperty(bad, fc.boolean(), async (value, withV0) => {
          const header = `t=${NOW_SEC},v1=${value}${withV0 ? `,v0=${VALID_V1}` : ""}`;
          await expectRejected(await send(post(CREATED, header)), ["signature_mismatch"]);
        }),
        runs(150),
      );
    },
    PROPERTY_MS,
  );

  test(
    "`createApp()` refuses Stripe-Signature headers of 16 to 64 KiB without writing anything",
    async () => {
      const kinds = {
        manyV1: "signature_mismatch",
        oneLongV1: "signature_mismatch",
        manyUnknown: "signature_mismatch",
        junk: "signature_malformed",
        manyT: "signature_malformed",
      } as const;
      const build = (kind: keyof typeof kinds, bytes: number, salt: number): string => {
        switch (kind) {
          case "manyV1": {
            let header = `t=${NOW_SEC}`;
            for (let i = 0; header.length < bytes; i++) header += `,v1=${(salt + i).toString(16).padStart(64, "0")}`;
            return header;
          }
          case "oneLongV1":
            return `t=${NOW_SEC},v1=${"ab".repeat(bytes / 2)}`;
          case "manyUnknown":
            return `t=${NOW_SEC},${Array.from({ length: Math.ceil(bytes / 12) }, (_, i) => `k${i}=${String(salt).padStart(8, "0")}`).join(",")},v1=${"0".repeat(64)}`;
          case "junk":
            return "x".repeat(bytes);
          case "manyT":
            return `${`t=${NOW_SEC},`.repeat(Math.ceil(bytes / 13))}v1=${VALID_V1}`;
        }
      };
      const kind = fc.constantFrom(...(Object.keys(kinds) as (keyof typeof kinds)[]));
      await fc.assert(
        fc.asyncProperty(kind, fc.integer({ min: 16 * 1024, max: 64 * 1024 }), fc.nat(), async (k, bytes, salt) => {
          const header = build(k, bytes, salt);
          expect(header.length).toBeGreaterThanOrEqual(16 * 1024);
          await expectRejected(await send(post(CREATED, header)), [kinds[k]]);
        }),
        runs(40),
      );
    },
    PROPERTY_MS,
  );

  test(
    "`createApp()` answers 400 invalid_body or invalid_event for signed bodies of random bytes, random text, JSON and broken fixtures",
    async () => {
      const encode = (s: string) => new TextEncoder().encode(s);
      const fixtureBytes = encode(CREATED);
      const body = fc.oneof(
        fc.uint8Array({ maxLength: 2048 }),
        fc.string({ unit: "binary", maxLength: 300 }).map(encode),
        fc.json().map(encode),
        fc.integer({ min: 0, max: fixtureBytes.length - 1 }).map((n) => fixtureBytes.slice(0, n)),
        fc.tuple(fc.nat({ max: fixtureBytes.length - 1 }), fc.constantFrom(0x80, 0xbf, 0xc0, 0xc3, 0xed, 0xf5, 0xff)).map(([i, b]) => {
          const copy = fixtureBytes.slice();
          copy[i] = b;
          return copy;
        }),
        fc.constant(new Uint8Array([0xef, 0xbb, 0xbf, ...fixtureBytes])),
      );
      await fc.assert(
        fc.asyncProperty(body, async (bytes) => {
          const text = exactText(bytes);
          // A prefix that still parses as the whole event (the fixture minus its final newline) is valid input.
          fc.pre(text === null || !isStripeEvent(parsed(text)));
          // A sender signs its exact text; bytes that are not UTF-8 are signed as a lenient reader would decode them.
          const header = await signStripePayload(text ?? new TextDecoder().decode(bytes), SECRET, NOW_SEC);
          await expectRejected(await send(post(bytes, header)), [text === null ? "invalid_body" : "invalid_event"]);
        }),
        runs(150),
      );
    },
    PROPERTY_MS,
  );

  test(
    "`createApp()` answers 400 invalid_event for validly signed JSON that is not a Stripe event",
    async () => {
      const eventId = fc.oneof(
        fc.stringMatching(/^evt_[A-Za-z0-9_]{1,30}$/),
        fc.string(),
        fc.integer(),
        fc.constantFrom(null, "evt_", "evt_a-b", "EVT_1", "evt_1 ", `evt_${"a".repeat(251)}`),
      );
      const type = fc.oneof(
        fc.constantFrom("invoice.paid", "invoice.created", "plan.created", "", "x".repeat(201)),
        fc.string(),
        fc.integer(),
        fc.constant(null),
      );
      const dataObject = fc.oneof(
        fc.constant(invoice()),
        fc.constant(null),
        fc.array(fc.integer(), { maxLength: 2 }),
        fc.string(),
        fc.integer(),
        fc.boolean(),
      );
      const data = fc.oneof(fc.record({ object: dataObject }, { requiredKeys: [] }), fc.constant(null), fc.constant([]), fc.string());
      const objectField = fc.oneof(fc.constantFrom("event", "Event", "invoice", "v2.core.event", ""), fc.string(), fc.constant(null));
      const eventLike = fc.record({ id: eventId, object: objectField, type, data }, { requiredKeys: [] });
      const notEvent = fc
        .oneof({ weight: 4, arbitrary: eventLike }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) })
        .filter((v) => !isStripeEvent(v));
      await fc.assert(
        fc.asyncProperty(notEvent, fc.boolean(), async (value, pretty) => {
          const body = JSON.stringify(value, null, pretty ? 2 : undefined) ?? "null";
          await expectRejected(await send(await signed(body)), ["invalid_event"]);
        }),
        runs(200),
      );
    },
    PROPERTY_MS,
  );
});

// ---- verified events: recorded, never a 5xx ---------------------------------------------------

const INVOICE_TYPES = [
  "invoice.created",
  "invoice.finalized",
  "invoice.marked_uncollectible",
  "invoice.voided",
  "invoice.paid",
  "invoice.payment_succeeded",
] as const;
const FIELDS = ["id", "customer", "currency", "amount_due", "amount_paid"] as const;
type Field = (typeof FIELDS)[number];
type Corruption = { kind: "missing" } | { kind: "mistyped"; value: unknown };

/** Values `readInvoice` must refuse, per field (src/handlers/billing.ts). */
const BAD_VALUES: Record<Field, readonly unknown[]> = {
  id: [null, 42, "", "cus_123", "IN_123", "in", true, [], {}],
  customer: [null, 7, "", {}, { id: 5 }, { id: "" }, [], false],
  currency: [null, "USD", "us", "usdd", "", 840, "u$d", ["usd"]],
  amount_due: [null, -1, 1.5, "2000", 2 ** 53 + 2, true, [], {}, -0.5],
  amount_paid: [null, -1, 1.5, "2000", 2 ** 53 + 2, false, [], {}, -0.5],
};
const corruption = (field: Field) =>
  fc.option(
    fc.oneof(
      fc.constant<Corruption>({ kind: "missing" }),
      fc.constantFrom(...BAD_VALUES[field]).map((value): Corruption => ({ kind: "mistyped", value })),
    ),
    { nil: undefined, freq: 2 },
  );
const corruptions = fc
  .record({
    id: corruption("id"),
    customer: corruption("customer"),
    currency: corruption("currency"),
    amount_due: corruption("amount_due"),
    amount_paid: corruption("amount_paid"),
  })
  .filter((c) => FIELDS.some((f) => c[f] !== undefined));

describe("verified events", () => {
  test(
    "`createApp()` parks a validly signed invoice event with missing or mistyped fields as needs-review: 200, one row, last_error naming exactly those fields",
    async () => {
      let delivered = 0;
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...INVOICE_TYPES), corruptions, async (type, broken) => {
          const n = ++delivered;
          const eventId = `evt_bad_fields_${n}`;
          const object = invoice({
            id: `in_prop_${n}`,
            customer: `cus_MARKER${n}`,
            amount_paid: 2000,
            status: "paid",
            description: `PAYLOAD-MARKER-${n}`,
          });
          const named = FIELDS.filter((f) => broken[f] !== undefined);
          for (const field of named) {
            const c = broken[field];
            if (c?.kind === "missing") delete object[field];
            else if (c?.kind === "mistyped") object[field] = c.value;
          }
          const body = eventBody(eventId, type, object);
          const reply = await send(await signed(body));
          expect(reply.status).toBe(200);
          expect(reply.body).toEqual({ outcome: "needs_review", event_id: eventId });
          expect(reply.text).not.toContain("MARKER");

          const rows = await db<{ event_type: string; parked: boolean; processed: boolean; attempts: number; last_error: string | null }[]>`
          select event_type, needs_review_at is not null as parked, processed_at is not null as processed, attempts, last_error
            from webhook_inbox
           where event_id = ${eventId}
        `;
          expect(rows).toHaveLength(1);
          const row = rows[0];
          expect(row).toMatchObject({ event_type: type, parked: true, processed: false, attempts: 1 });
          const lastError = row?.last_error ?? "";
          for (const field of FIELDS)
            expect({ field, named: new RegExp(`\\b${field}\\b`).test(lastError) }).toEqual({ field, named: named.includes(field) });
          expect(lastError).not.toContain("MARKER");
          expect(lastError).not.toContain(`in_prop_${n}`);
          // Checked for this event only, so that fast-check's shrinking after a failure names the right input.
          expect(await count(db, "invoices", `id = 'in_prop_${n}'`)).toBe(0);
          expect(await count(db, "ledger_entries", `event_id = '${eventId}'`)).toBe(0);
        }),
        runs(150),
      );
      expect(await count(db, "webhook_inbox", "needs_review_at is not null and processed_at is null")).toBe(delivered);
      expect(await rowCount()).toBe(delivered);
    },
    PROPERTY_MS,
  );

  /** A 2xx with exactly one inbox row, or a 4xx invalid_event with none; never a 5xx. */
  async function expectRecordedOrRefused(reply: Reply, eventId: string): Promise<void> {
    expect(reply.status < 500 ? "not a 5xx" : `${reply.status} ${reply.body.error}`).toBe("not a 5xx");
    const rows = await count(db, "webhook_inbox", `event_id = '${eventId}'`);
    if (reply.status === 200) {
      expect(["processed", "ignored", "needs_review"]).toContain(reply.body.outcome ?? "");
      expect(rows).toBe(1);
    } else {
      expect([reply.status, reply.body.error]).toEqual([400, "invalid_event"]);
      expect(rows).toBe(0);
    }
  }

  test(
    "`createApp()` never answers 5xx to a validly signed event, whatever JSON text its data.object carries",
    async () => {
      // Any code point, lone UTF-16 surrogates and U+0000 included: JSON.stringify escapes them, and the receiver must
      // either store the event or refuse it for good; a 5xx would have Stripe retry an event that can never succeed.
      const unit = fc.oneof(
        { weight: 8, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength: 1 }) },
        { weight: 1, arbitrary: fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)) },
        { weight: 1, arbitrary: fc.constant("\u0000") },
      );
      let delivered = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom("invoice.created", "invoice.paid", "plan.created"),
          fc.jsonValue({ stringUnit: unit, maxDepth: 3 }),
          async (type, extra) => {
            const eventId = `evt_wild_json_${++delivered}`;
            const reply = await send(
              await signed(eventBody(eventId, type, invoice({ id: `in_wild_${delivered}`, amount_paid: 2000, metadata: { note: extra } }))),
            );
            await expectRecordedOrRefused(reply, eventId);
          },
        ),
        runs(100),
      );
    },
    PROPERTY_MS,
  );

  // JSON that JSON.parse accepts but PostgreSQL jsonb cannot store, like the \u0000 case of app.test.ts.
  const unstorable: [string, (body: string) => string][] = [
    ["a lone UTF-16 surrogate escape (\\ud800) in a string", (body) => body.replace('"usd"', '"usd", "note": "a\\ud800b"')],
    ["a number beyond PostgreSQL's numeric range (1e131072)", (body) => body.replace('"usd"', '"usd", "note": 1e131072')],
    ["arrays nested 100 000 deep", (body) => body.replace('"usd"', `"usd", "note": ${"[".repeat(100_000)}${"]".repeat(100_000)}`)],
  ];
  test.each(unstorable)("`createApp()` does not answer 5xx to a validly signed event holding %s", async (_label, edit) => {
    const eventId = "evt_unstorable_1";
    const body = edit(eventBody(eventId, "invoice.created", invoice({ id: "in_unstorable_1" })));
    expect(isStripeEvent(JSON.parse(body))).toBe(true);
    await expectRecordedOrRefused(await send(await signed(body)), eventId);
  });
});

test("`createApp()` still answers 200 processed to a valid delivery after every property above", async () => {
  const reply = await send(post(CREATED, VALID_HEADER));
  expect(reply.status).toBe(200);
  expect(reply.body).toEqual({ outcome: "processed", event_id: "evt_1SkB1aLgUG5tbmjc0created" });
  expect(await count(db, "webhook_inbox", "outcome = 'processed'")).toBe(1);
  expect(await count(db, "invoices")).toBe(1);
});
