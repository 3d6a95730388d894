// Delivering fixture sets as Stripe would (signed, all at once) and draining them with real workers:
// the shared steps of the handler suites (test/handlers/).
import type { Db } from "../../src/db/db.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import type { Fetcher } from "../../src/worker/stripe-fetch.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { closeAll, connections, SECRET, signedRequest } from "./helpers.ts";

const URL_DEFAULT = "http://inbox.test/webhooks/stripe";

/** Posts `bodies` signed to a `billing` endpoint in `mode`, all at once; returns each outcome (or `<status> <error>`). */
export async function deliverAll(db: Db, mode: Mode, bodies: string[]): Promise<string[]> {
  const app = createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]), log: () => {} });
  return Promise.all(
    bodies.map(async (body) => {
      const response = await app.fetch(await signedRequest(URL_DEFAULT, body));
      const reply = (await response.json()) as { outcome?: string; error?: string };
      return response.status === 200 ? (reply.outcome ?? "?") : `${response.status} ${reply.error}`;
    }),
  );
}

/** Every body of `events` twice, shuffled by `seed` (the same order for the same seed). */
export function shuffledTwice(events: { body: string }[], seed: number): string[] {
  const bodies = [...events, ...events].map((e) => e.body);
  shuffleInPlace(bodies, mulberry32(seed));
  return bodies;
}

/**
 * Runs two workers on `url` (a connection pool each) with `tables` until `db` has no row left to
 * process, then stops them. Bounded at 30 s (a stuck run, not a speed assertion).
 * @throws Error naming the rows left when the bound passes.
 */
export async function drainWithWorkers(
  db: Db,
  url: string,
  tables: Readonly<Record<string, HandlerTable>>,
  fetcher?: Fetcher,
): Promise<void> {
  const pools = connections(url, 2);
  const controller = new AbortController();
  const workers = pools.map((pool) =>
    runWorker({ db: pool, tables, fetcher, signal: controller.signal, pollMs: 20, backoff: { baseMs: 10, capMs: 50 }, log: () => {} }),
  );
  try {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const [row] = await db<
        { n: number }[]
      >`select count(*)::int as n from webhook_inbox where processed_at is null and needs_review_at is null`;
      if (row?.n === 0) break;
      if (Date.now() > deadline) throw new Error(`Cannot drain the inbox: ${row?.n} rows left`);
      await Bun.sleep(20);
    }
  } finally {
    controller.abort();
    await Promise.all(workers);
    await closeAll(pools);
  }
}
