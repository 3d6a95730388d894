// `bun run dispatch` as a real process: settings from the environment, every problem listed at once
// without echoing the secret, delivery to a Standard Webhooks receiver on 127.0.0.1, SIGTERM → exit 0.
// Only processes this file spawned are signalled, by pid.
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { Webhook } from "standardwebhooks";
import { count, freshDatabase } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const ROOT = join(import.meta.dir, "..", "..");
const BIN = join(ROOT, "src", "bin", "dispatch.ts");
const SECRET = `whsec_${btoa("outbox-bin-test-key-0123456789")}`;
const WAITS = 30_000;

const fresh = await freshDatabase();
const db = fresh.db;
const children = new Set<Subprocess>();
afterAll(async () => {
  for (const child of children) process.kill(child.pid, "SIGKILL");
  await Promise.all([...children].map((c) => c.exited));
  await fresh.drop();
});

/** `bun src/bin/dispatch.ts` with exactly `env` (plus PATH), stdout and stderr collected. */
function spawnDispatch(env: Record<string, string>): {
  child: Subprocess<"ignore", "pipe", "pipe">;
  stdout: Promise<string>;
  stderr: Promise<string>;
} {
  const child = Bun.spawn([process.execPath, BIN], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  children.add(child);
  void child.exited.then(() => children.delete(child));
  return { child, stdout: new Response(child.stdout).text(), stderr: new Response(child.stderr).text() };
}

test(
  "`bun run dispatch` lists every settings problem at once, naming each variable, and exits 2",
  async () => {
    const { child, stderr } = spawnDispatch({
      DATABASE_URL: fresh.url,
      OUTBOX_SINK_SECRET: "hunter2-not-a-whsec",
      OUTBOX_LEASE_MS: "1000",
      OUTBOX_TIMEOUT_MS: "5000",
    });
    expect(await child.exited).toBe(2);
    const text = await stderr;
    expect(text).toContain("OUTBOX_SINK_URL is not set");
    expect(text).toContain("--timeout-ms (5000) must be shorter than --lease-ms (1000)");
    expect(text).not.toContain("hunter2");

    const second = spawnDispatch({
      DATABASE_URL: fresh.url,
      OUTBOX_SINK_URL: "http://127.0.0.1:9/x",
      OUTBOX_SINK_SECRET: "hunter2-not-a-whsec",
      OUTBOX_ORDERED: "yes",
    });
    expect(await second.child.exited).toBe(2);
    const secondText = await second.stderr;
    expect(secondText).toContain("OUTBOX_SINK_URL / OUTBOX_SINK_SECRET: Cannot use the sink secret: it must start with whsec_");
    expect(secondText).toContain('OUTBOX_ORDERED must be true or false, got "yes"');
    expect(secondText).not.toContain("hunter2");
  },
  WAITS,
);

test(
  "`bun run dispatch` delivers committed outbox rows to a Standard Webhooks receiver and stops on SIGTERM with exit 0",
  async () => {
    const verifier = new Webhook(SECRET);
    const received = new Map<string, unknown>();
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(request) {
        const body = await request.text();
        try {
          received.set(request.headers.get("webhook-id") ?? "", verifier.verify(body, Object.fromEntries(request.headers)));
          return new Response(null, { status: 204 });
        } catch {
          return new Response(null, { status: 400 });
        }
      },
    });
    const { child, stdout, stderr } = spawnDispatch({
      DATABASE_URL: fresh.url,
      OUTBOX_SINK_URL: `http://127.0.0.1:${server.port}/hooks`,
      OUTBOX_SINK_SECRET: SECRET,
      OUTBOX_POLL_MS: "50",
      OUTBOX_ORDERED: "true",
    });
    try {
      const rows = await db<{ id: string; message_id: string }[]>`
      insert into outbox (aggregate_type, aggregate_id, event_type, message_key, payload)
      select 'Invoice', 'in_bin_' || (n % 2), 'InvoicePaymentBooked', n::text, jsonb_build_object('n', n) from generate_series(1, 6) n
      returning id::text as id, message_id
    `;
      await waitUntil("6 published rows", async () => (await count(db, "outbox", "published_at is not null")) === 6, { timeoutMs: 20_000 });
      expect([...received.keys()].sort()).toEqual(rows.map((r) => r.message_id).sort());
      process.kill(child.pid, "SIGTERM");
      expect(await child.exited).toBe(0);
      const lines = (await stdout)
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines[0]).toMatchObject({
        dispatcher: "started",
        database: "DATABASE_URL",
        ordered: true,
        sink: `http://127.0.0.1:${server.port}`,
      });
      expect(lines.filter((l) => l.outcome === "published").length).toBe(6);
      expect(lines.at(-1)).toMatchObject({ dispatcher: "stopped", level: "info", message: "dispatcher stopped" });
      expect(JSON.stringify(lines)).not.toContain(SECRET);
      expect(await stderr).toBe("");
    } finally {
      server.stop(true);
    }
  },
  WAITS,
);
