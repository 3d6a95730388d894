// The embedded development PostgreSQL outlives the commands that use it, until `bun run db:stop`
// (src/runtime/dev-database.ts, src/bin/db.ts): the command that started it never takes it away from
// the others. Real processes (`bun src/bin/serve.ts`, `migrate.ts`, `worker.ts`, `db.ts`) on their own
// data directory; only processes this file spawned are signalled, by pid, and the server is stopped by
// its postmaster.pid.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { freePort, temporaryDataDir } from "../../src/runtime/embedded-postgres.ts";
import { runningPostmaster, stopDevDatabase } from "../../src/runtime/dev-database.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";
import { eventBody, invoice, SECRET, signedRequest } from "../support/helpers.ts";

const tracked = new Set<Subprocess>();
const dirs = new Set<string>();
afterAll(async () => {
  for (const child of tracked) child.kill("SIGKILL");
  for (const dir of dirs) {
    await stopDevDatabase(dir).catch(() => {});
    await rm(dirname(dir), { recursive: true, force: true });
  }
});

/** Settings for commands on a new data directory of their own. */
async function newCheckout() {
  const dir = await temporaryDataDir("webhook-inbox-dev-db-");
  dirs.add(dir);
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    NO_COLOR: "1",
    HOST: "127.0.0.1",
    PORT: String(await freePort()),
    EMBEDDED_PG_DIR: dir,
    EMBEDDED_PG_PORT: String(await freePort()),
    STRIPE_WEBHOOK_SECRET: SECRET,
  };
  return { dir, env };
}

/** POSTs a signed `invoice.created` for a new invoice to serve; resolves the status and outcome. */
async function deliver(env: { PORT: string }, id: string): Promise<{ status: number; outcome: unknown }> {
  const body = eventBody(`evt_dev_db_${id}`, "invoice.created", invoice({ id: `in_dev_db_${id}`, status: "draft", amount_paid: 0 }));
  const response = await fetch(await signedRequest(`http://127.0.0.1:${env.PORT}/webhooks/stripe`, body));
  return { status: response.status, outcome: ((await response.json()) as { outcome?: unknown }).outcome };
}

test("`migrate` and `serve` started together on a new data directory both use the one server, which outlives migrate: serve delivers", async () => {
  const { dir, env } = await newCheckout();
  const serve = spawnBun(["src/bin/serve.ts"], env, tracked);
  const migrate = spawnBun(["src/bin/migrate.ts"], env, tracked);
  expect(await migrate.child.exited).toBe(0);
  await waitForLine(serve, "webhook-inbox listening on", 30_000);
  const postmaster = runningPostmaster(dir);
  expect(postmaster?.port).toBe(Number(env.EMBEDDED_PG_PORT));
  expect(await deliver(env, "1")).toEqual({ status: 200, outcome: "processed" });
  serve.child.kill("SIGTERM");
  expect(await serve.child.exited).toBe(0);
  // Exactly one of the two started it, and said so with how to stop it; neither failed.
  const said = (await migrate.stderr) + (await serve.stderr);
  expect(said.split("Started the embedded PostgreSQL").length - 1).toBe(1);
  expect(said).toContain("bun run db:stop stops it");
  expect(said).not.toContain("Cannot");
  // Neither command stopped it: the same postmaster still runs.
  expect(runningPostmaster(dir)?.pid).toBe(postmaster!.pid);
}, 120_000);

test("a worker that started the database and then stopped, and a serve SIGKILLed, leave it to the next serve: deliveries go on", async () => {
  const { dir, env } = await newCheckout();
  const worker = spawnBun(["src/bin/worker.ts"], env, tracked);
  await waitForLine(worker, '{"worker":"started"', 60_000);
  const serve = spawnBun(["src/bin/serve.ts"], env, tracked);
  await waitForLine(serve, "webhook-inbox listening on", 30_000);
  worker.child.kill("SIGTERM");
  expect(await worker.child.exited).toBe(0);
  expect(await deliver(env, "2")).toEqual({ status: 200, outcome: "processed" });
  const postmaster = runningPostmaster(dir)!.pid;
  serve.child.kill("SIGKILL");
  await serve.child.exited;
  const next = spawnBun(["src/bin/serve.ts"], env, tracked);
  await waitForLine(next, "webhook-inbox listening on", 30_000);
  expect(await deliver(env, "3")).toEqual({ status: 200, outcome: "processed" });
  expect(runningPostmaster(dir)?.pid).toBe(postmaster);
  next.child.kill("SIGTERM");
  expect(await next.child.exited).toBe(0);
}, 120_000);

test("commands after the first find the running server's port without EMBEDDED_PG_PORT: `inbox migrate` and `inbox status` on a server started on another port than 54329", async () => {
  const { dir, env } = await newCheckout();
  const db = spawnBun(["src/bin/db.ts", "start"], env, tracked);
  expect(await db.child.exited).toBe(0);
  const { EMBEDDED_PG_PORT: port, ...withoutPort } = env;
  expect(runningPostmaster(dir)?.port).toBe(Number(port));
  const inbox = async (...args: string[]) => {
    const run = spawnBun(["src/bin/inbox.ts", ...args], withoutPort, tracked);
    const code = await run.child.exited;
    await run.stdoutDone;
    return { code, out: run.lines.join("\n"), err: await run.stderr };
  };
  const migrated = await inbox("migrate");
  expect({ code: migrated.code, err: migrated.err }).toEqual({ code: 0, err: "" });
  expect(migrated.out).toContain("Applied 0001_inbox.sql");
  const status = await inbox("status", "--json");
  expect(status.code).toBe(0);
  expect(JSON.parse(status.out)).toMatchObject({ backlog: [], processes: [] });
  // One given another port is still refused, naming the one to use.
  const other = spawnBun(["src/bin/inbox.ts", "status"], { ...env, EMBEDDED_PG_PORT: String(Number(port) + 1) }, tracked);
  expect(await other.child.exited).toBe(1);
  expect(await other.stderr).toContain(
    `runs on port ${port}, not ${Number(port) + 1} (EMBEDDED_PG_PORT): leave EMBEDDED_PG_PORT unset or set it to ${port}`,
  );
}, 120_000);

test("`db:status`, `db:start`, `db:stop` and `db:reset` report, start, stop and delete the development database", async () => {
  const { dir, env } = await newCheckout();
  const db = async (command: string, ...args: string[]) => {
    const run = spawnBun(["src/bin/db.ts", command, ...args], env, tracked);
    const code = await run.child.exited;
    await run.stdoutDone;
    return { code, out: run.lines.join("\n"), err: await run.stderr };
  };
  const before = await db("status");
  expect(before.code).toBe(3);
  expect(before.out).toContain("not running");

  const started = await db("start");
  expect(started.code).toBe(0);
  const pid = runningPostmaster(dir)?.pid;
  expect(pid).toBeNumber();
  const status = await db("status");
  expect(status.code).toBe(0);
  const url = `postgres://postgres:postgres@127.0.0.1:${env.EMBEDDED_PG_PORT}/postgres`;
  expect(status.out).toContain(`running (pid ${pid}) on 127.0.0.1:${env.EMBEDDED_PG_PORT}`);
  expect(status.out).toContain(`psql '${url}'`);
  // The psql line works: the URL it gives is the server's.
  const sql = (await import("postgres")).default(url, { max: 1, onnotice: () => {} });
  expect((await sql`select 1 as one`)[0]?.one).toBe(1);
  await sql.end({ timeout: 1 });

  const stopped = await db("stop");
  expect(stopped.code).toBe(0);
  expect(stopped.out).toContain("stopped");
  expect(runningPostmaster(dir)).toBeUndefined();
  expect(existsSync(join(dir, "PG_VERSION"))).toBe(true); // data kept
  expect((await db("status")).code).toBe(3);

  await db("start");
  // A command still connected (here one connection, as a running serve holds) makes reset refuse.
  const holder = (await import("postgres")).default(url, { max: 1, onnotice: () => {} });
  await holder`select 1`;
  const refusedWhileUsed = await db("reset");
  expect(refusedWhileUsed.code).toBe(1);
  expect(refusedWhileUsed.err).toContain("Cannot reset: 1 other connection(s) to the embedded PostgreSQL");
  expect(existsSync(join(dir, "PG_VERSION"))).toBe(true);
  await holder.end({ timeout: 1 });
  const reset = await db("reset");
  expect(reset.code).toBe(0);
  expect(runningPostmaster(dir)).toBeUndefined();
  expect(existsSync(dir)).toBe(false);

  // A directory that is not a cluster is never deleted.
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "notes.txt"), "mine\n");
  const refused = await db("reset");
  expect(refused.code).toBe(1);
  expect(refused.err).toContain("is not a PostgreSQL data directory (no PG_VERSION); nothing deleted");
  expect(existsSync(join(dir, "notes.txt"))).toBe(true);
}, 120_000);
