// `bun run bench` with DATABASE_URL set: it measures in a scratch database it creates and drops, and
// leaves the database DATABASE_URL names untouched (it truncates tables between sections). No timing
// is asserted here; the figures live in README.md.
import { afterAll, expect, test } from "bun:test";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { billingHandlers } from "../src/handlers/billing.ts";
import { receiveSync } from "../src/receive.ts";
import { count, eventBody, freshDatabase, invoice, verified } from "./helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());

test("`bun run bench --only duplicates` with DATABASE_URL leaves that database's rows alone and drops its scratch database", async () => {
  const body = eventBody("evt_bench_keep", "invoice.paid", invoice({ id: "in_bench_keep", amount_paid: 2000, status: "paid" }));
  expect(await receiveSync(db, { provider: "stripe", endpoint: "billing", handlers: billingHandlers }, verified(body))).toBe("processed");
  const out = await mkdtemp(join(tmpdir(), "webhook-inbox-bench-out-"));
  try {
    const child = Bun.spawn([process.execPath, "src/bin/bench.ts", "--quick", "--only", "duplicates", "--out", out], {
      cwd: join(import.meta.dir, ".."), env: { ...process.env, DATABASE_URL: fresh.url }, stdout: "pipe", stderr: "pipe", timeout: 100_000,
    });
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    expect({ code, stderr: code === 0 ? "" : stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
    expect(stdout).toContain("duplicate storm:");
    expect(JSON.parse(await readFile(join(out, "latest.json"), "utf8"))).toHaveProperty("duplicate storm");
    // The user's rows are all still there: the bench wrote into its own database.
    expect(await count(db, "webhook_inbox")).toBe(1);
    expect(await count(db, "ledger_entries", "invoice_id = 'in_bench_keep'")).toBe(1);
    expect(await count(db, "outbox")).toBe(1);
    const scratch = await db<{ datname: string }[]>`select datname from pg_database where datname like 'webhook_inbox_bench%'`;
    expect([...scratch]).toEqual([]);
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}, 120_000);
