// The package as a team's own app imports it: by its name, through package.json `exports`
// (self-reference), not by paths into src/.
import { afterAll, expect, test } from "bun:test";
import { createApp, PermanentError, runWorker, statementHandler, stripeEndpoints, stripeProvider, providerNamed, type HandlerTable } from "webhook-inbox";
import * as handlers from "webhook-inbox/handlers";
import { loadMigrations } from "webhook-inbox/migrations";
import { fixture, freshDatabase, SECRET, signedRequest } from "./support/helpers.ts";

const fresh = await freshDatabase();
afterAll(() => fresh.drop());

test("`createApp()` imported as webhook-inbox serves one signed Stripe event and records it processed", async () => {
  const app = createApp({ db: fresh.db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]), log: () => {} });
  const body = fixture("01_invoice.created_evt_1SkB1aLgUG5tbmjc0created.json");
  const res = await app.fetch(await signedRequest("http://app.test/webhooks/stripe", body));
  expect(await res.json()).toEqual({ outcome: "processed", event_id: "evt_1SkB1aLgUG5tbmjc0created" });
  expect(await fresh.db`select provider, event_id, outcome from webhook_inbox`).toEqual([{ provider: "stripe", event_id: "evt_1SkB1aLgUG5tbmjc0created", outcome: "processed" }] as never);
});

test("`webhook-inbox` exports the handler helpers, the worker, the providers and the migrations loader", () => {
  const table: HandlerTable = { "x.y": statementHandler("noop", (sql) => ({ noop: sql`select 1` })) };
  expect(typeof table["x.y"]?.statement).toBe("function");
  expect(handlers.statementHandler).toBe(statementHandler);
  expect(handlers.PermanentError).toBe(PermanentError);
  expect(typeof runWorker).toBe("function");
  expect(providerNamed("stripe")).toBe(stripeProvider);
  expect(loadMigrations().length).toBeGreaterThan(9);
});
