// The claim loops' heartbeat rows (src/loop/heartbeat.ts, sql/0029): real `worker` and `dispatch` processes
// beat theirs, a SIGKILLed one reads dead after three missed beats and a SIGTERMed one stopped, a beat is
// one write per interval whatever the claims, and a day-old row is deleted. Only processes this file
// spawned are signalled, by pid.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { DEAD_AFTER_BEATS, readHeartbeats, startHeartbeat, type LoopProcess } from "../../src/loop/heartbeat.ts";
import { receiveAsync } from "../../src/receiver/receive.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { handlerTables } from "../../src/receiver/endpoints.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";
import { eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const tracked = new Set<Subprocess>();
afterAll(async () => {
  for (const child of tracked) process.kill(child.pid, "SIGKILL");
  await Promise.all([...tracked].map((c) => c.exited));
  await fresh.drop();
});

const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
let seq = 0;
/** Queues `n` invoice.paid events for the worker; returns their ids. */
async function queue(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `evt_beat_${++seq}`;
    const body = eventBody(id, "invoice.paid", invoice({ id: `in_beat_${seq}`, amount_paid: 2000, status: "paid" }));
    expect(await receiveAsync(db, target, verified(body))).toBe("queued");
    ids.push(id);
  }
  return ids;
}

async function processOf(pid: number): Promise<LoopProcess | undefined> {
  return (await readHeartbeats(db)).find((p) => p.pid === pid);
}

test("`bun run worker` beats its row (host, pid, slots, rows claimed, last claim); SIGKILLed it reads dead after 3 missed beats, SIGTERMed stopped", async () => {
  const env = { PATH: process.env.PATH, DATABASE_URL: fresh.url };
  const args = ["src/bin/worker.ts", "--heartbeat-ms", "200", "--poll-ms", "100", "--concurrency", "2"];
  const worker = spawnBun(args, env, tracked);
  await waitForLine(worker, '{"worker":"started"', 30_000);
  const pid = worker.child.pid;
  await waitUntil("the worker's heartbeat row", async () => (await processOf(pid))?.state === "alive", { timeoutMs: 15_000 });
  expect(await processOf(pid)).toMatchObject({ kind: "worker", detail: "2 slot(s), batch 32", claimed: 0, lastClaimAgeSec: null });
  await queue(3);
  await waitUntil("3 rows claimed, in a beat", async () => (await processOf(pid))?.claimed === 3, { timeoutMs: 15_000 });
  const beating = await processOf(pid);
  expect(beating?.state).toBe("alive");
  expect(beating?.lastClaimAgeSec).toBeLessThan(60);
  expect(beating?.beatEveryMs).toBe(200);

  worker.child.kill("SIGKILL");
  await worker.child.exited;
  // Dead only once 3 beats (600 ms) went missing, by the database's clock: never "stopped".
  await waitUntil("the killed worker read as dead", async () => (await processOf(pid))?.state === "dead", { timeoutMs: 15_000 });
  const dead = await processOf(pid);
  expect(dead?.beatAgeSec).toBeGreaterThanOrEqual((DEAD_AFTER_BEATS * 200) / 1000);

  const second = spawnBun(args, env, tracked);
  await waitForLine(second, '{"worker":"started"', 30_000);
  await waitUntil("the second worker's row", async () => (await processOf(second.child.pid))?.state === "alive", { timeoutMs: 15_000 });
  second.child.kill("SIGTERM");
  expect(await second.child.exited).toBe(0);
  expect((await processOf(second.child.pid))?.state).toBe("stopped");
  // Live first: the stopped and the dead row follow.
  expect((await readHeartbeats(db)).map((p) => p.state)).toEqual(["stopped", "dead"]);
}, 90_000);

test("`bun run dispatch` beats its row naming its sink's origin, never its path, query or secret", async () => {
  const sink = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("ok") });
  const secret = `whsec_${btoa("heartbeat-test-key-0123456789")}`;
  try {
    const dispatcher = spawnBun(
      ["src/bin/dispatch.ts", "--heartbeat-ms", "200", "--poll-ms", "100"],
      {
        PATH: process.env.PATH,
        DATABASE_URL: fresh.url,
        OUTBOX_SINK_URL: `http://127.0.0.1:${sink.port}/hooks/secret-path?token=abc`,
        OUTBOX_SINK_SECRET: secret,
      },
      tracked,
    );
    await waitForLine(dispatcher, '{"dispatcher":"started"', 30_000);
    const pid = dispatcher.child.pid;
    await waitUntil("the dispatcher's heartbeat row", async () => (await processOf(pid))?.state === "alive", { timeoutMs: 15_000 });
    const row = await processOf(pid);
    expect(row).toMatchObject({ kind: "dispatcher", detail: `sink http://127.0.0.1:${sink.port}, 4 slot(s)` });
    dispatcher.child.kill("SIGTERM");
    expect(await dispatcher.child.exited).toBe(0);
    expect((await processOf(pid))?.state).toBe("stopped");
  } finally {
    await sink.stop(true);
  }
}, 60_000);

test("a worker claiming 120 rows one at a time writes its heartbeat once per interval, not once per claim", async () => {
  // Every write to loop_heartbeats counted by a trigger of this file's own database.
  await db.unsafe(`
    create table beat_writes (at timestamptz not null default clock_timestamp());
    create function count_beat() returns trigger language plpgsql as $$ begin insert into beat_writes default values; return null; end $$;
    create trigger count_beat after insert or update on loop_heartbeats for each row execute function count_beat();
  `);
  const ids = await queue(120);
  const stop = new AbortController();
  const started = Date.now();
  const everyMs = 300;
  const running = runWorker({
    db,
    signal: stop.signal,
    tables: handlerTables,
    concurrency: 1,
    batch: 1,
    pollMs: 50,
    listen: false,
    log: () => {},
    heartbeat: { host: "test-host", pid: 4242, everyMs },
  });
  await waitUntil(
    "120 rows processed",
    async () =>
      (await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where outcome = 'processed' and event_id = any(${ids})`)[0]
        ?.n === 120,
    { timeoutMs: 60_000, intervalMs: 50 },
  );
  stop.abort();
  await running;
  const elapsed = Date.now() - started;
  const [writes] = await db<{ n: number }[]>`select count(*)::int as n from beat_writes`;
  const row = (await readHeartbeats(db)).find((p) => p.pid === 4242);
  expect(row).toMatchObject({ host: "test-host", state: "stopped", claimed: 120 });
  // At most one per interval plus the first and the stop; 120 claims would have been 120.
  expect(writes!.n).toBeLessThanOrEqual(Math.ceil(elapsed / everyMs) + 2);
  expect(writes!.n).toBeLessThan(120);
}, 90_000);

test("a beat deletes rows silent for a day; a row silent for 3 of its intervals reads dead, one within them alive", async () => {
  await db`delete from loop_heartbeats`;
  await db`
    insert into loop_heartbeats (id, kind, host, pid, beat_every_ms, started_at, beat_at)
    values ('old', 'worker', 'gone-host', 1, 10000, now() - interval '3 days', now() - interval '25 hours'),
           ('dead', 'dispatcher', 'lost-host', 2, 10000, now() - interval '1 hour', now() - interval '31 seconds'),
           ('late', 'worker', 'slow-host', 3, 10000, now() - interval '1 hour', now() - interval '29 seconds')
  `;
  const stop = new AbortController();
  const heartbeat = startHeartbeat(db, "worker", { host: "here", pid: 4, everyMs: 60_000 }, () => {}, stop.signal);
  await waitUntil("the new row", async () => (await readHeartbeats(db)).some((p) => p.pid === 4));
  stop.abort();
  await heartbeat.stopped();
  const rows = await readHeartbeats(db);
  expect(rows.map((p) => [p.host, p.state])).toEqual([
    ["slow-host", "alive"],
    ["here", "stopped"],
    ["lost-host", "dead"],
  ]);
});
