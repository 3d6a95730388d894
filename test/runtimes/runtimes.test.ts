// One smoke test per runtime entry file: the real server as a child process on a free loopback port
// against the test PostgreSQL, the fixture lifecycle shuffled with duplicates, a bad signature, SIGTERM.
// Bun: src/bin/serve.ts; Deno: src/adapter/deno/serve.ts; Node.js: the bundle of src/adapter/node/serve.ts;
// workerd: src/adapter/workerd/worker.ts through Miniflare. Binaries come from node_modules (npm).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { deliver } from "../../src/dev/deliver.ts";
import { eventBody, freshDatabase, invoice, lifecycle, SECRET, signedRequest, OTHER_SECRET } from "../support/helpers.ts";
import { expectLifecycleRows } from "./lifecycle-rows.ts";
import { ROOT, startServer, type ServerProcess } from "./server-process.ts";

/** The Deno binary of the `deno` npm package (its platform package @deno/linux-x64-glibc; no download). */
function denoBinary(): string {
  const install = createRequire(import.meta.url)("deno/install_api.cjs") as { runInstall(): string };
  return install.runInstall();
}

interface Runtime {
  name: string;
  command(): string[];
  env?: Record<string, string>;
  /** The pool of the workerd entry is per request; the others migrate at start like `bun run serve`. */
  migrates: boolean;
}

const RUNTIMES: Runtime[] = [
  { name: "Bun (Bun.serve)", command: () => [process.execPath, "src/bin/serve.ts"], migrates: true },
  {
    name: "Deno (Deno.serve)",
    command: () => [denoBinary(), "run", "--allow-net", "--allow-env", "--allow-read=sql", "src/adapter/deno/serve.ts"],
    // A registry nobody answers: Deno must load every npm package from node_modules.
    env: { DENO_NO_UPDATE_CHECK: "1", NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/" },
    migrates: true,
  },
  { name: "Node.js (node:http + @remix-run/node-fetch-server)", command: () => ["node", "dist/node/serve.mjs"], migrates: true },
  { name: "workerd (Miniflare)", command: () => [process.execPath, "src/adapter/workerd/miniflare.ts"], migrates: false },
];

beforeAll(() => {
  // Node.js 20 runs the bundle; `bun run build:node` is the command docs/runtimes.md gives.
  const build = spawnSync("bun", ["run", "build:node"], { cwd: ROOT, encoding: "utf8" });
  if (build.status !== 0) throw new Error(`bun run build:node failed:\n${build.stdout}\n${build.stderr}`);
});

const servers: ServerProcess[] = [];
// Each test stops its server; this only catches one a failed test left running.
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop(2_000)));
}, 15_000);

describe.each(RUNTIMES)("$name", (runtime) => {
  test("serves the shuffled, duplicated lifecycle, answers 400 to a bad signature with nothing written, and stops on SIGTERM", async () => {
    const fresh = await freshDatabase({ migrated: !runtime.migrates });
    try {
      const server = await startServer({
        command: runtime.command(),
        env: { DATABASE_URL: fresh.url, STRIPE_WEBHOOK_SECRET: SECRET, ...runtime.env },
      });
      servers.push(server);
      const url = `${server.base}/webhooks/stripe`;

      const summary = await deliver(lifecycle(), {
        url,
        secret: SECRET,
        copies: 3,
        shuffle: true,
        seed: 7,
        concurrency: 6,
        retryBaseMs: 50,
      });
      expect(summary.failures).toEqual([]);
      expect(summary.outcomes).toEqual({ processed: 11, ignored: 1, duplicate: 24 });
      await expectLifecycleRows(fresh.db);

      const forged = await signedRequest(
        url,
        eventBody("evt_forged_runtime", "invoice.paid", invoice({ id: "in_forged_runtime", status: "paid", amount_paid: 2000 })),
        { secret: OTHER_SECRET },
      );
      const response = await fetch(forged);
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ error: "signature_mismatch" });
      const [rows] = await fresh.db<{ inbox: number; invoices: number }[]>`
        select (select count(*)::int from webhook_inbox where event_id = 'evt_forged_runtime') as inbox,
               (select count(*)::int from invoices where id = 'in_forged_runtime') as invoices
      `;
      expect(rows).toEqual({ inbox: 0, invoices: 0 });

      // The entry files that start a server print where its endpoints, operator's page and metrics are.
      if (runtime.migrates) expect(server.output()).toContain(`  endpoint billing (sync): POST ${server.base}/webhooks/stripe/billing`);
      expect(await server.stop()).toBe(0);
      expect(
        await fetch(`${server.base}/healthz`).then(
          () => "answered",
          () => "refused",
        ),
      ).toBe("refused");
    } finally {
      await fresh.drop();
    }
  }, 60_000);

  test("async mode: records the shuffled, duplicated lifecycle for the worker, every 2xx with its row", async () => {
    const fresh = await freshDatabase({ migrated: !runtime.migrates });
    try {
      const server = await startServer({
        command: runtime.command(),
        env: { DATABASE_URL: fresh.url, STRIPE_WEBHOOK_SECRET: SECRET, INBOX_MODE: "async", ...runtime.env },
      });
      servers.push(server);
      const summary = await deliver(lifecycle(), {
        url: `${server.base}/webhooks/stripe`,
        secret: SECRET,
        copies: 3,
        shuffle: true,
        seed: 9,
        concurrency: 6,
        retryBaseMs: 50,
      });
      expect(summary.failures).toEqual([]);
      expect(summary.outcomes).toEqual({ queued: 11, ignored: 1, duplicate: 24 });
      const [rows] = await fresh.db<{ queued: number; ignored: number }[]>`
        select count(*) filter (where processed_at is null)::int as queued, count(*) filter (where outcome = 'ignored')::int as ignored
          from webhook_inbox
      `;
      expect(rows).toEqual({ queued: 11, ignored: 1 });
      expect(await server.stop()).toBe(0);
    } finally {
      await fresh.drop();
    }
  }, 60_000);
});
