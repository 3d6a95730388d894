// `bun run bench:retention` (src/dev/bin/retention-bench.ts) on a small inbox: both layouts get the same
// rows, the partitioned one loses the oldest 4 weeks by dropping their partitions (and shrinks), the
// unpartitioned one loses the same rows by DELETE (and does not shrink, not even after VACUUM), and its
// scratch databases are dropped. No timing is asserted; the figures live in docs/scale.md.
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { freshDatabase } from "../support/helpers.ts";

const fresh = await freshDatabase();
afterAll(() => fresh.drop());

interface Sizes {
  total: number;
  heap: number;
  indexes: number;
}

test("bench:retention purges the same 4 weeks of a year of rows by partition drop (smaller after) and by DELETE (no smaller, even after VACUUM), then drops its scratch databases", async () => {
  // 5,200 rows over 52 weeks: 100 a week, so the oldest 4 weeks hold 400.
  const child = Bun.spawn([process.execPath, "src/dev/bin/retention-bench.ts", "--rows", "5200", "--chunk", "1000"], {
    cwd: join(import.meta.dir, "..", ".."),
    env: { ...process.env, DATABASE_URL: fresh.url },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 150_000,
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  expect({ code, stderr: code === 0 ? "" : stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
  const json = stdout.split("\n").find((l) => l.startsWith("json: "));
  const r = JSON.parse(json?.slice("json: ".length) ?? "{}") as {
    partitioned: { before: Sizes; after: Sizes; purge: { deleted: number; partitionsDropped: string[]; wal: number } };
    unpartitioned: { before: Sizes; afterDelete: Sizes; afterVacuum: Sizes; delete: { deleted: number; wal: number } };
  };
  expect(r.partitioned.purge.deleted).toBe(400);
  expect(r.unpartitioned.delete.deleted).toBe(400);
  // 4 weekly partitions and the empty one under them went whole; the inbox's heap shrank with them.
  expect(r.partitioned.purge.partitionsDropped.filter((name) => /^webhook_inbox_\d{8}$/.test(name))).toHaveLength(4);
  expect(r.partitioned.purge.partitionsDropped.filter((name) => name.startsWith("webhook_inbox_before_"))).toHaveLength(1);
  expect(r.partitioned.after.heap).toBeLessThan(r.partitioned.before.heap);
  // DELETE leaves the heap as large as it was, and a plain VACUUM does not give the space back.
  expect(r.unpartitioned.afterDelete.heap).toBe(r.unpartitioned.before.heap);
  expect(r.unpartitioned.afterVacuum.heap).toBe(r.unpartitioned.before.heap);
  expect(r.unpartitioned.delete.wal).toBeGreaterThan(0);
  expect(stdout).toContain("| partitioned (0026) | purge --whole-partitions");
  const left = await fresh.db<{ datname: string }[]>`select datname from pg_database where datname like 'retention_bench%'`;
  expect([...left]).toEqual([]);
}, 180_000);
