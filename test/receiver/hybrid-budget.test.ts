import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { FIXTURES_DIR, freshDatabase, readFixtures, SECRET, signedRequest } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(async () => {
  await fresh.drop();
}, 20_000);

const NOW_SEC = 1_764_470_000;

// The in-request attempt of hybrid mode is bounded by the server (SET LOCAL statement_timeout): with a
// budget of 1 ms nearly every attempt is stopped by PostgreSQL and the event goes to the worker, while
// 48 deliveries at a time share the pool. Every delivery must be answered 200 and each event kept once.
test("hybrid with a 1 ms budget: 500 deliveries 48 at a time of the money-out events are all answered 200, and each event is one row", async () => {
  const app = createApp({
    db,
    endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "hybrid" }], 1),
    now: () => NOW_SEC * 1000,
    log: () => {},
    maxInFlight: 10,
  });
  const events = readFixtures(join(FIXTURES_DIR, "stripe", "money-out"));
  const deliveries = events.flatMap((e) => Array.from({ length: 25 }, () => e.body));
  shuffleInPlace(deliveries, mulberry32(7));
  const statuses: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: 48 }, async () => {
      while (next < deliveries.length) {
        const body = deliveries[next++] as string;
        const res = await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe", body, { timestampSec: NOW_SEC }));
        await res.arrayBuffer();
        statuses.push(res.status);
      }
    }),
  );
  expect(statuses.length).toBe(events.length * 25);
  expect(statuses.filter((s) => s !== 200)).toEqual([]);
  const [row] = await db<{ rows: number }[]>`select count(*)::int as rows from webhook_inbox`;
  expect(row?.rows).toBe(events.length);
}, 60_000);
