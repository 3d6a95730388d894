// `bun run bench:retention` (src/dev/bin/retention-bench.ts) on a small inbox: a year of settled rows on the
// layout of sql/0027 loses its oldest 4 weeks to the product's purge(): the keys by batched DELETE (the
// state table's rows gone, dead tuples left until VACUUM, no space back), the payloads by dropping their
// weekly partitions (the payload table smaller); the optional plain DELETE is rolled back; the scratch
// database is dropped. No timing is asserted; the figures live in docs/scale.md.
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
interface Contents {
  stateRows: number;
  payloadRows: number;
  partitions: string[];
}
interface Purged {
  wal: number;
  after: Sizes;
  deadTuples: number;
  result: { deleted: number; partitionsDropped: string[]; payloadsDropped: number; openPayloadsMoved: number };
}

test("bench:retention purges the oldest 4 of 52 weeks with purge(): keys deleted (dead tuples until VACUUM), 4 weekly payload partitions and the empty `before` dropped, then drops its scratch database", async () => {
  // 5,200 rows over 52 weeks: 100 a week, so the oldest 4 weeks hold 400.
  const child = Bun.spawn([process.execPath, "src/dev/bin/retention-bench.ts", "--rows", "5200", "--chunk", "1000", "--plain-delete"], {
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
    before: Contents & { state: Sizes; payloads: Sizes; deadTuples: number };
    plainDelete: { deleted: number; wal: number };
    keys: Purged;
    payloads: Purged;
    vacuum: { wal: number; after: Sizes; deadTuples: number };
    after: Contents;
  };
  expect({ state: r.before.stateRows, payloads: r.before.payloadRows, dead: r.before.deadTuples }).toEqual({
    state: 5200,
    payloads: 5200,
    dead: 0,
  });
  // The comparison DELETE found the same 400 keys and was rolled back: the purge still had them to delete.
  expect(r.plainDelete.deleted).toBe(400);
  expect(r.plainDelete.wal).toBeGreaterThan(0);
  // Keys: exactly the 4 weeks' settled rows, nothing of the payloads; their tuples stay dead in the heap, which keeps its size.
  expect(r.keys.result).toMatchObject({ deleted: 400, partitionsDropped: [], payloadsDropped: 0 });
  expect(r.keys.deadTuples).toBe(400);
  expect(r.keys.after.heap).toBe(r.before.state.heap);
  // Payloads: 4 weekly partitions and the empty one under them went whole, with their 400 payloads; no key went.
  expect(r.payloads.result).toMatchObject({ deleted: 0, payloadsDropped: 400, openPayloadsMoved: 0 });
  expect(r.payloads.result.partitionsDropped.filter((name) => /^webhook_inbox_payloads_\d{8}$/.test(name))).toHaveLength(4);
  expect(r.payloads.result.partitionsDropped.filter((name) => name.startsWith("webhook_inbox_payloads_before_"))).toHaveLength(1);
  expect(r.payloads.after.total).toBeLessThan(r.before.payloads.total);
  expect(r.after.partitions.filter((name) => r.payloads.result.partitionsDropped.includes(name))).toEqual([]);
  expect(r.before.partitions.length - r.after.partitions.length).toBe(5);
  // VACUUM leaves no dead tuple; the rest of the year is all there, each key with its payload.
  expect(r.vacuum.deadTuples).toBe(0);
  expect(r.vacuum.wal).toBeGreaterThan(0);
  expect({ state: r.after.stateRows, payloads: r.after.payloadRows }).toEqual({ state: 4800, payloads: 4800 });
  expect(stdout).toContain("| purge(), payloads: 5 partitions (4 weeks and the empty `before`) counted, detached and dropped | 400 |");
  expect(stdout).toContain("| purge(), keys: settled state rows deleted in batches of 1000 | 400 |");
  const left = await fresh.db<{ datname: string }[]>`select datname from pg_database where datname like 'retention_bench%'`;
  expect([...left]).toEqual([]);
}, 180_000);
