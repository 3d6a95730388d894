// `bun run chaos --thin`: the storm as thin notifications to a thin endpoint, real serve/worker processes
// killed, PostgreSQL restarted, workers reading every object from the local fake Stripe API (with 429s).
import { expect, test } from "bun:test";
import { ownServerEnv, runChaos } from "../support/chaos-run.ts";
import { thinStorm } from "../../src/dev/chaos/thin-storm.ts";
import { generateStorm } from "../../src/dev/chaos/model.ts";
import { FakeStripeStore } from "../../src/dev/fake-stripe/store.ts";

test("`thinStorm()` puts each object's last copy in Stripe's store and keeps ids, pointing each notification at its object", () => {
  const storm = generateStorm({ invoices: 12, seed: 7 });
  const store = new FakeStripeStore();
  const thin = thinStorm(storm, store);
  expect(thin.events.map((e) => e.id)).toEqual(storm.events.map((e) => e.id));
  for (const e of thin.events) {
    const n = JSON.parse(e.body) as { object: string; type: string; snapshot_event: string; related_object: { url: string } };
    expect({ object: n.object, snapshot: n.snapshot_event, type: n.type }).toEqual({
      object: "v2.core.event",
      snapshot: e.id,
      type: e.type,
    });
    expect(e.type.startsWith("v1.")).toBe(true);
  }
  // Every invoice that ends paid is stored paid, whichever of its events the shuffle put last.
  for (const expected of storm.expected) {
    const stored = store.get("invoices", expected.invoiceId);
    expect(stored?.status).toBe(expected.status ?? undefined);
  }
});

test("`chaos --thin` loses nothing and books nothing twice with thin events through SIGKILLs, a PostgreSQL restart and API 429s", async () => {
  // --rate 60: 20 lifecycles are the least chaos accepts at that rate with restart-db (minimumInvoices()).
  const args = ["--json", "--thin", "--invoices", "20", "--poison", "1", "--seed", "404", "--rate", "60", "--fault-every-ms", "1500"];
  const { code, summary } = await runChaos([...args, "--deadline-ms", "90000"], ownServerEnv(), 170_000);
  expect({ code, ...summary }).toMatchObject({
    code: 0,
    mode: "thin",
    passed: true,
    lost: 0,
    unacknowledged: 0,
    double_booked: 0,
    wrong_final_state: 0,
    unprocessed: 0,
    unexpected_needs_review: 0,
    poison_parked: 1,
    db_restarts: 1,
  });
}, 180_000);
