// Edge file (bun:test, node:fs, the embedded PostgreSQL): the package's contract suite, exported as
// "webhook-inbox/testing", that an app runs against its own configuration: its handlers, its
// migrations, its fixtures, on a real PostgreSQL, in every mode.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";

/** bun:test's `expect`, for an app's `check` (the scaffold's contract test imports both from here). */
export { expect };
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { connect, type Db } from "../db/db.ts";
import { migrate } from "../db/migrate.ts";
import { createApp } from "../receiver/app.ts";
import { handlerTables, stripeEndpoints, useHandlerTables, workerHandlerTables } from "../receiver/endpoints.ts";
import type { Mode } from "../receiver/receive.ts";
import { signStripePayload } from "../providers/stripe.ts";
import { runWorker } from "../worker/worker.ts";
import { replayEvent } from "../ops/replay.ts";
import { snapshotTables } from "./table-snapshot.ts";
import { applyAppConfig, loadAppConfig, type LoadedAppConfig } from "../runtime/app-config-file.ts";
import { appMigrationsFolder, loadAppMigrations, loadMigrations, useAppMigrations } from "../runtime/migrations-fs.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../runtime/embedded-postgres.ts";
import { rm } from "node:fs/promises";
import { dirname } from "node:path";

/** What {@link contractSuite} runs against. */
export interface ContractSuiteOptions {
  /** The app's configuration module (a path or file URL), loaded as `webhook-inbox --config` loads it; default: the shipped configuration. */
  config?: string | URL;
  /** Stripe event files (JSON, one Event object each), delivered to the `billing` endpoint. */
  fixtures: readonly (string | URL)[];
  /** Deliveries of each fixture, shuffled together and sent concurrently (duplicates). Default 3. */
  copies?: number;
  /** Modes to run, each on its own database. Default sync, async and hybrid. */
  modes?: readonly Mode[];
  /** Seed of the shuffle (printed in the test name). Default a random one. */
  seed?: number;
  /**
   * The app's own check of its tables after every delivery was answered and (async, hybrid) the worker
   * drained them; the same end state is expected in every mode. Throw (or `expect`) to fail.
   */
  check(db: Db): Promise<void>;
  /** Longest wait for the worker to settle every row, ms. Default 30,000. */
  drainMs?: number;
  /** A server whose user may CREATE DATABASE, for the scratch databases. Default `DATABASE_URL`; unset: an embedded PostgreSQL 18 in a temporary folder. */
  databaseUrl?: string;
}

const SECRET = "whsec_contract_suite_secret";

/**
 * Registers, with bun:test, one `describe` of tests per mode, with the app's configuration in force
 * for the suite's run (handler tables and migrations folder restored after): a throwaway PostgreSQL (embedded in a
 * temporary folder, removed after, or a scratch database on `DATABASE_URL`'s server, dropped after), the package's and
 * the app's migrations, every fixture delivered `copies` times shuffled and concurrently through the
 * receiver's `fetch`, signed like Stripe (Stripe docs, "Check the webhook signatures"); each answer must
 * be 200 with `processed`, `duplicate`, `ignored` or `queued`. Then the worker drains (async, hybrid),
 * and the suite asserts one inbox row per event id, every row settled and none needs-review, and runs
 * `check`; then it replays every event through the app's handlers (`inbox replay`) and asserts that no
 * row of any table but the inbox's changed (a handler that books again on a second run fails here) and
 * runs `check` again. One more test requires a fixture for every event type of the app's Stripe table
 * (a type with none is never tested, and a misspelt type never runs). Follows the inbox article's test
 * table (seed §10: duplicates, concurrency, order) and its idempotent handlers (seed §5.2).
 * @throws Error (at load) when a fixture is not a JSON object with an `id`.
 */
export function contractSuite(options: ContractSuiteOptions): void {
  const fixtures = options.fixtures.map((f) => {
    const path = f instanceof URL ? fileURLToPath(f) : f;
    const body = readFileSync(path, "utf8");
    const event = JSON.parse(body) as { id?: unknown; type?: unknown };
    if (typeof event.id !== "string") throw new Error(`contractSuite: ${path} is not a Stripe event (no "id")`);
    return { path, body, id: event.id, type: typeof event.type === "string" ? event.type : "" };
  });
  const copies = options.copies ?? 3;
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  let server: EmbeddedServer | undefined;
  let adminUrl = options.databaseUrl ?? process.env.DATABASE_URL ?? "";
  // The configuration is this process's while the suite runs, and what was there before comes back after.
  const before = { tables: handlerTables, migrations: appMigrationsFolder() };
  let loaded: LoadedAppConfig | undefined;
  let dataDir: string | undefined;

  beforeAll(async () => {
    const configPath = options.config instanceof URL ? fileURLToPath(options.config) : options.config;
    useAppMigrations(undefined);
    loaded = await loadAppConfig(configPath);
    applyAppConfig(loaded, {});
    if (!adminUrl) {
      dataDir = await temporaryDataDir();
      server = await startEmbeddedPostgres({ dir: dataDir, port: 0, flags: ["-c", "fsync=off"] });
      adminUrl = server.url;
    }
  }, 120_000);
  afterAll(async () => {
    useHandlerTables(before.tables);
    useAppMigrations(before.migrations);
    await server?.stop();
    if (dataDir) await rm(dirname(dataDir), { recursive: true, force: true });
  });

  test("webhook-inbox contract: every event type of the app's Stripe handler table has a fixture", () => {
    const delivered = new Set(fixtures.map((f) => f.type));
    const untested = Object.keys(loaded?.config.handlers?.stripe ?? {}).filter((type) => !delivered.has(type));
    // A type listed here is never run by this suite: add a fixture of it, or fix its spelling in the table.
    expect(untested).toEqual([]);
  });

  for (const mode of options.modes ?? (["sync", "async", "hybrid"] as const)) {
    describe(`webhook-inbox contract, ${mode} mode`, () => {
      test(`${fixtures.length} event(s) × ${copies}, shuffled (seed ${seed}) and concurrent: each applied once`, async () => {
        const name = `contract_${mode}_${process.pid}_${Date.now()}`;
        const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
        await admin.unsafe(`create database ${name}`);
        const url = new URL(adminUrl);
        url.pathname = `/${name}`;
        const db = connect(url.toString(), { max: 8 });
        try {
          await migrate(db, loadMigrations(), loadAppMigrations());
          const app = createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]), log: () => {} });
          const deliveries = shuffle(
            fixtures.flatMap((f) => Array.from({ length: copies }, () => f)),
            seed,
          );
          const answers = await Promise.all(
            deliveries.map(async (f) => {
              const signature = await signStripePayload(f.body, SECRET, Math.floor(Date.now() / 1000));
              const res = await app.fetch(
                new Request("http://contract.test/webhooks/stripe", {
                  method: "POST",
                  headers: { "content-type": "application/json", "stripe-signature": signature },
                  body: f.body,
                }),
              );
              return { file: f.path, status: res.status, body: (await res.json()) as { outcome?: string } };
            }),
          );
          for (const a of answers) {
            expect({ file: a.file, status: a.status }).toEqual({ file: a.file, status: 200 });
            expect(["processed", "duplicate", "ignored", "queued"]).toContain(a.body.outcome ?? String(a.body));
          }
          if (mode !== "sync") await drain(db, options.drainMs ?? 30_000);
          const rows = await db<{ event_id: string; settled: boolean; parked: boolean }[]>`
            select event_id, processed_at is not null as settled, needs_review_at is not null as parked
              from webhook_inbox where provider = 'stripe' and endpoint = 'billing' order by event_id
          `;
          const ids = [...new Set(fixtures.map((f) => f.id))].sort();
          expect(rows.map((r) => r.event_id)).toEqual(ids);
          expect(rows.filter((r) => !r.settled || r.parked).map((r) => r.event_id)).toEqual([]);
          await options.check(db);
          // A replay (`inbox replay`, a backfill meeting a settled event) runs each handler again: it must book nothing.
          const settled = await snapshotTables(db);
          for (const id of ids) await replayEvent(db, { provider: "stripe", endpoint: "billing", eventId: id }, handlerTables.stripe);
          expect(await snapshotTables(db)).toEqual(settled);
          await options.check(db);
        } finally {
          await db.end({ timeout: 5 });
          await admin.unsafe(`drop database if exists ${name} with (force)`);
          await admin.end();
        }
      }, 120_000);
    });
  }
}

/** Runs a worker with the process's handler tables until no row is unsettled and not parked, or `limitMs` passed. */
async function drain(db: Db, limitMs: number): Promise<void> {
  const stop = new AbortController();
  const worker = runWorker({ db, signal: stop.signal, tables: workerHandlerTables(false), pollMs: 25, listen: false, log: () => {} });
  try {
    for (const start = Date.now(); Date.now() - start < limitMs; await new Promise((r) => setTimeout(r, 25))) {
      const [row] = await db<{ n: number }[]>`
        select count(*)::int as n from webhook_inbox where processed_at is null and needs_review_at is null
      `;
      if (row?.n === 0) return;
    }
  } finally {
    stop.abort();
    await worker;
  }
}

/** A copy of `items` in an order fixed by `seed` (Fisher–Yates with a 32-bit LCG). */
function shuffle<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed >>> 0;
  for (let i = out.length - 1; i > 0; i--) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}
