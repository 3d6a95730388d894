// Commands started while PostgreSQL is down (src/db/wait-for-database.ts, src/runtime/ready-database.ts,
// src/receiver/starting-app.ts): they wait with backoff, one line per attempt, and come up once it answers; past
// DATABASE_WAIT_MS they exit 1 with one line. "Down" is a closed port: a TCP proxy in front of the test
// server that starts listening when the test says so. Only processes this file spawned are signalled, by pid.
import { afterAll, expect, test } from "bun:test";
import { createServer, connect as tcpConnect, type Server, type Socket } from "node:net";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { connect } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { receiveAsync } from "../../src/receiver/receive.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { DatabaseWaitError, waitForDatabase } from "../../src/db/wait-for-database.ts";
import { count, eventBody, freshDatabase, invoice, SECRET, signedRequest, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const ROOT = join(import.meta.dir, "..", "..");
const PASSWORD_MARK = "pw-never-printed-7391";
const children = new Set<Subprocess>();
const proxies = new Set<{ close(): void }>();
const drops: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
  await Promise.all([...children].map((c) => c.exited));
  for (const proxy of proxies) proxy.close();
  for (const drop of drops) await drop();
});

/**
 * A port that refuses connections until `open()`, then forwards each connection to the test server:
 * the database as a command sees it while it is down, and once it is back.
 */
async function downDatabase(url: string): Promise<{ url: string; open(): Promise<void>; close(): void }> {
  const target = new URL(url);
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  const proxy = {
    url: Object.assign(new URL(url), { port: String(port) }).toString(),
    open: () =>
      new Promise<void>((resolve) => {
        server = createServer((client) => {
          const upstream = tcpConnect(Number(target.port), target.hostname);
          for (const s of [client, upstream]) {
            sockets.add(s);
            s.on("error", () => {
              client.destroy();
              upstream.destroy();
            });
            s.on("close", () => sockets.delete(s));
          }
          client.pipe(upstream);
          upstream.pipe(client);
        });
        server.listen(port, "127.0.0.1", () => resolve());
      }),
    close() {
      server?.close();
      for (const s of sockets) s.destroy();
    },
  };
  proxies.add(proxy);
  return proxy;
}

/** `bun src/bin/<command>.ts` with exactly `env` (plus PATH), both streams collected line by line. */
function start(command: string, args: string[], env: Record<string, string>) {
  const child = Bun.spawn([process.execPath, join(ROOT, "src", "bin", `${command}.ts`), ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", NO_COLOR: "1", ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  children.add(child);
  const out = { stdout: [] as string[], stderr: [] as string[] };
  const read = async (stream: ReadableStream<Uint8Array>, lines: string[]) => {
    const decoder = new TextDecoder();
    let partial = "";
    for await (const chunk of stream) {
      const parts = (partial + decoder.decode(chunk, { stream: true })).split("\n");
      partial = parts.pop() ?? "";
      lines.push(...parts);
    }
    if (partial) lines.push(partial);
  };
  const done = Promise.all([read(child.stdout, out.stdout), read(child.stderr, out.stderr), child.exited]).then(([, , code]) => code);
  const seen = (stream: "stdout" | "stderr", pattern: RegExp) =>
    waitUntil(
      `${command} printing ${pattern} (stdout ${JSON.stringify(out.stdout)}, stderr ${JSON.stringify(out.stderr)})`,
      async () => {
        if (out[stream].some((l) => pattern.test(l))) return true;
        if (child.exitCode !== null)
          throw new Error(
            `${command} exited ${child.exitCode} before printing ${pattern}: stdout ${JSON.stringify(out.stdout)}, stderr ${JSON.stringify(out.stderr)}`,
          );
        return false;
      },
      { timeoutMs: 30_000, intervalMs: 20 },
    );
  return { child, out, done, seen };
}

test("`waitForDatabase()` gives up after its limit with one line naming the failure, never the URL or password", async () => {
  const port = await freePort();
  const db = connect(`postgres://webhook:${PASSWORD_MARK}@127.0.0.1:${port}/inbox`, { max: 1 });
  const logged: string[] = [];
  const err = await waitForDatabase(db, { limitMs: 300, log: (line) => logged.push(line) }).catch((e: unknown) => e);
  await db.end({ timeout: 1 });
  expect(err).toBeInstanceOf(DatabaseWaitError);
  const message = (err as Error).message;
  expect(message).toMatch(
    /^the database did not answer within 0\.3 s \(\d+ attempts, last: ECONNREFUSED\); DATABASE_WAIT_MS sets how long to wait$/,
  );
  expect(logged.length).toBeGreaterThan(0);
  for (const line of [message, ...logged]) {
    expect(line).not.toContain(PASSWORD_MARK);
    expect(line).not.toContain(String(port));
  }
});

test("`waitForDatabase()` fails at once when the server refuses the password, and rejects with the reason when aborted", async () => {
  const fresh = await freshDatabase({ migrated: false });
  drops.push(fresh.drop);
  const wrong = new URL(fresh.url);
  wrong.password = PASSWORD_MARK;
  const db = connect(wrong.toString(), { max: 1 });
  const logged: string[] = [];
  const err = await waitForDatabase(db, { limitMs: 60_000, log: (line) => logged.push(line) }).catch((e: unknown) => e);
  await db.end({ timeout: 1 });
  expect(err).toBeInstanceOf(DatabaseWaitError);
  expect((err as Error).message).toContain("the database refused the connection: password authentication failed");
  expect((err as Error).message).toContain("SQLSTATE 28P01");
  expect(logged).toEqual([]);

  const closed = connect(`postgres://webhook:x@127.0.0.1:${await freePort()}/inbox`, { max: 1 });
  const controller = new AbortController();
  const waiting = waitForDatabase(closed, {
    limitMs: 60_000,
    signal: controller.signal,
    log: () => controller.abort(new Error("stop requested")),
  }).catch((e: unknown) => e);
  expect(((await waiting) as Error).message).toBe("stop requested");
  await closed.end({ timeout: 1 });
});

test("`bun run worker` started while the database is down waits, one line per attempt, then migrates and processes a queued row once it is up", async () => {
  const fresh = await freshDatabase({ migrated: false });
  drops.push(fresh.drop);
  const down = await downDatabase(fresh.url);
  const worker = start("worker", ["--poll-ms", "200"], { DATABASE_URL: down.url });
  await worker.seen("stderr", /^Waiting for the database: attempt 2 failed \(ECONNREFUSED\); next in/);
  await down.open();
  await worker.seen("stdout", /"worker":"started"/);

  const body = eventBody("evt_wait_worker_paid", "invoice.paid", invoice({ id: "in_wait_worker", amount_paid: 2000, status: "paid" }));
  expect(await receiveAsync(fresh.db, { provider: "stripe", endpoint: "billing", handlers: billingHandlers }, verified(body))).toBe(
    "queued",
  );
  await waitUntil(
    "the worker processing the queued row",
    async () => (await count(fresh.db, "ledger_entries", "invoice_id = 'in_wait_worker'")) === 1,
    { timeoutMs: 20_000 },
  );
  expect(await count(fresh.db, "webhook_inbox", "event_id = 'evt_wait_worker_paid' and processed_at is not null")).toBe(1);

  process.kill(worker.child.pid, "SIGTERM");
  expect(await worker.done).toBe(0);
  expect(worker.out.stderr.filter((l) => l !== "").every((l) => l.startsWith("Waiting for the database: attempt "))).toBe(true);
}, 60_000);

test("`bun run worker` stopped while it waits for the database exits 0 without starting", async () => {
  const worker = start("worker", [], { DATABASE_URL: `postgres://webhook:x@127.0.0.1:${await freePort()}/inbox` });
  await worker.seen("stderr", /^Waiting for the database: attempt 1 failed/);
  process.kill(worker.child.pid, "SIGTERM");
  expect(await worker.done).toBe(0);
  const said = worker.out.stdout.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(said.map(({ worker: w, signal }) => ({ w, signal }))).toEqual([
    { w: "stopping", signal: "SIGTERM" },
    { w: "stopped", signal: undefined },
  ]);
}, 30_000);

test("`bun run serve` started while the database is down answers /healthz 200, /readyz 503 and a delivery 503 with Retry-After, writes nothing, and serves once it is up", async () => {
  const fresh = await freshDatabase({ migrated: false });
  drops.push(fresh.drop);
  const down = await downDatabase(fresh.url);
  const port = await freePort();
  const serve = start("serve", [], { DATABASE_URL: down.url, PORT: String(port), HOST: "127.0.0.1", STRIPE_WEBHOOK_SECRET: SECRET });
  await serve.seen("stderr", /^Waiting for the database: attempt 1 failed/);
  const base = `http://127.0.0.1:${port}`;
  const body = eventBody("evt_wait_serve_paid", "invoice.paid", invoice({ id: "in_wait_serve", amount_paid: 2000, status: "paid" }));

  expect((await fetch(`${base}/healthz`)).status).toBe(200);
  const readyz = await fetch(`${base}/readyz`);
  expect({ status: readyz.status, body: await readyz.json() }).toMatchObject({ status: 503, body: { error: "database_unavailable" } });
  const early = await fetch(await signedRequest(`${base}/webhooks/stripe`, body));
  expect({ status: early.status, retryAfter: early.headers.get("retry-after"), body: await early.json() }).toMatchObject({
    status: 503,
    retryAfter: "5",
    body: { error: "database_unavailable" },
  });

  await down.open();
  const listening = await serve.seen("stdout", /listening on/).then(() => serve.out.stdout.find((l) => l.includes("listening on")) ?? "");
  expect(listening).toContain("applied 0001_");
  // The early delivery left nothing behind; the same event delivered now is processed.
  expect(await count(fresh.db, "webhook_inbox")).toBe(0);
  expect(await count(fresh.db, "ledger_entries")).toBe(0);
  const late = await fetch(await signedRequest(`${base}/webhooks/stripe`, body));
  expect({ status: late.status, body: await late.json() }).toEqual({
    status: 200,
    body: { outcome: "processed", event_id: "evt_wait_serve_paid" },
  });
  expect(await count(fresh.db, "ledger_entries", "invoice_id = 'in_wait_serve'")).toBe(1);
  expect((await fetch(`${base}/readyz`)).status).toBe(200);

  process.kill(serve.child.pid, "SIGTERM");
  expect(await serve.done).toBe(0);
}, 60_000);

test("`bun run worker`, `serve` and `dispatch` give up after DATABASE_WAIT_MS: exit 1, one line, no stack trace, never the password", async () => {
  const url = `postgres://webhook:${PASSWORD_MARK}@127.0.0.1:${await freePort()}/inbox`;
  const env = { DATABASE_URL: url, DATABASE_WAIT_MS: "300" };
  const runs = [
    start("worker", [], env),
    start("serve", [], { ...env, PORT: String(await freePort()), STRIPE_WEBHOOK_SECRET: SECRET }),
    start("dispatch", [], {
      ...env,
      OUTBOX_SINK_URL: "http://127.0.0.1:9/sink",
      OUTBOX_SINK_SECRET: `whsec_${btoa("database-wait-test-key-01234")}`,
    }),
  ];
  const names = ["worker", "serve", "dispatch"];
  for (const [i, run] of runs.entries()) {
    expect(await run.done).toBe(1);
    const lines = run.out.stderr.filter((l) => l !== "");
    expect(lines.at(-1)).toMatch(
      new RegExp(
        `^Cannot start webhook-inbox ${names[i]}: the database did not answer within 0\\.3 s \\(\\d+ attempts, last: ECONNREFUSED\\); DATABASE_WAIT_MS sets how long to wait$`,
      ),
    );
    expect(lines.slice(0, -1).every((l) => l.startsWith("Waiting for the database: attempt "))).toBe(true);
    expect([...run.out.stdout, ...lines].join("\n")).not.toContain(PASSWORD_MARK);
  }
}, 60_000);

test("`bun run serve` whose connection is lost during the migrations waits for the database again and starts, instead of exiting 1", async () => {
  const fresh = await freshDatabase({ migrated: false });
  drops.push(fresh.drop);
  const holder = connect(fresh.url, { max: 1 });
  try {
    // Hold the migrations' lock so serve's migration transaction waits on it, then end that backend.
    await holder`select pg_advisory_lock(hashtext('webhook-inbox:migrate'))`;
    const port = await freePort();
    const serve = start("serve", [], { DATABASE_URL: fresh.url, PORT: String(port), HOST: "127.0.0.1", STRIPE_WEBHOOK_SECRET: SECRET });
    await waitUntil(
      "serve's migration to wait on the lock",
      async () =>
        (
          await holder`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock%'`
        ).length > 0,
      { timeoutMs: 30_000, intervalMs: 20 },
    );
    await holder`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock%'`;
    await serve.seen("stderr", /lost the database during migrations/);
    await holder`select pg_advisory_unlock(hashtext('webhook-inbox:migrate'))`;
    await serve.seen("stdout", /webhook-inbox listening on/);
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
    process.kill(serve.child.pid, "SIGTERM");
    expect(await serve.done).toBe(0);
  } finally {
    await holder.end({ timeout: 1 });
  }
}, 60_000);
