// docs/deploy/nginx.conf as shipped, in front of two real `serve` processes (src/bin/serve.ts) against a
// fresh database: TLS from a throwaway CA (openssl), the file rendered with only its ports, certificate
// paths and log paths replaced (plus temporary paths under a temporary prefix), nginx started on
// loopback. Deliveries go through https://localhost:<port>/webhooks/stripe signed as Stripe signs them.
// Every process is started under coreutils `timeout`, signalled only by its pid, and stopped in afterAll.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { connect as tlsConnect } from "node:tls";
import { deliver, type EventFile } from "../../src/dev/deliver.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { expectLifecycleRows } from "../runtimes/lifecycle-rows.ts";
import { ROOT, startServer, type ServerProcess } from "../runtimes/server-process.ts";
import { binaryRequired } from "../support/support-binary.ts";
import { eventBody, freshDatabase, invoice, lifecycle, OTHER_SECRET, SECRET, signedRequest } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

/** The shipped example: the test renders it, never a copy of its own. */
const SHIPPED_CONF = join(ROOT, "docs", "deploy", "nginx.conf");
/** MAX_BODY_BYTES' default (src/config.ts), which the example's client_max_body_size must equal. */
const MAX_BODY_BYTES = 1024 * 1024;
const ADMIN_TOKEN = "nginx-test-admin-token-0123456789abcdef";

/**
 * A working nginx: NGINX_BIN when set (the only path tried), else the first in PATH, /usr/sbin,
 * /usr/local/sbin. Probed with `-v`: nginx has no `--version` (support-binary.ts's probe).
 */
function findNginx(env: Record<string, string | undefined> = process.env): string | undefined {
  const runs = (path: string) => spawnSync(path, ["-v"], { stdio: "ignore" }).status === 0;
  if (env.NGINX_BIN !== undefined) return runs(env.NGINX_BIN) ? env.NGINX_BIN : undefined;
  const dirs = [...(env.PATH ?? "").split(delimiter).filter(Boolean), "/usr/sbin", "/usr/local/sbin"];
  return dirs.map((dir) => join(dir, "nginx")).find(runs);
}

const nginxPath = findNginx();
// openssl has no --version either: found with `openssl version`, as in test/runtime/database-tls.test.ts.
const hasOpenssl = spawnSync("openssl", ["version"], { stdio: "ignore" }).status === 0;
const missing =
  nginxPath === undefined
    ? { name: "nginx", why: "nginx is not installed (not in PATH, /usr/sbin or NGINX_BIN): `apt-get install nginx` runs these tests" }
    : !hasOpenssl
      ? { name: "openssl", why: "openssl is not installed: `apt-get install openssl` runs these tests" }
      : undefined;
if (missing !== undefined) {
  if (binaryRequired(missing.name))
    test(`${missing.name} is required here (CI or REQUIRE_${missing.name.toUpperCase()}=1)`, () => {
      throw new Error(missing.why);
    });
  else test.skip(missing.why, () => {});
}

/** The ports of one run: nginx's public (TLS) and ops listeners, and the two `serve` processes. */
interface Ports {
  https: number;
  ops: number;
  serve: [number, number];
}

/**
 * The shipped nginx.conf with only what a test machine needs changed: loopback ports, the throwaway
 * certificate, logs and temporary files under `dir`. Each replaced text must occur exactly as often as
 * expected, so a change of the example fails here loudly instead of testing something else.
 */
function renderConfig(shipped: string, dir: string, ports: Ports): string {
  const temp = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map((kind) => `    ${kind}_temp_path ${dir}/temp/${kind};\n`).join("");
  const swaps: [from: string, to: string, times: number][] = [
    ["listen 443 ssl;", `listen 127.0.0.1:${ports.https} ssl;`, 1],
    ["server 127.0.0.1:3000 ", `server 127.0.0.1:${ports.serve[0]} `, 1],
    ["server 127.0.0.1:3001 ", `server 127.0.0.1:${ports.serve[1]} `, 1],
    ["listen 127.0.0.1:8080;", `listen 127.0.0.1:${ports.ops};`, 1],
    ["/etc/letsencrypt/live/webhooks.example.com/fullchain.pem", join(dir, "server.pem"), 1],
    ["/etc/letsencrypt/live/webhooks.example.com/privkey.pem", join(dir, "server.key"), 1],
    ["/var/log/nginx/", `${dir}/logs/`, 2],
    ["\nhttp {\n", `\nhttp {\n${temp}`, 1],
  ];
  let text = shipped;
  for (const [from, to, times] of swaps) {
    const found = text.split(from).length - 1;
    if (found !== times) throw new Error(`docs/deploy/nginx.conf has ${JSON.stringify(from)} ${found} times, the test expects ${times}`);
    text = text.replaceAll(from, to);
  }
  return text;
}

if (missing === undefined)
  describe("`bun run serve` behind docs/deploy/nginx.conf", () => {
    let dir = "";
    let ca = "";
    let ports: Ports;
    let fresh: Awaited<ReturnType<typeof freshDatabase>>;
    const servers: (ServerProcess | undefined)[] = [undefined, undefined];
    let nginx: ChildProcess | undefined;
    let nginxOutput = "";

    /** One `serve` on `port` (a free one when absent), with the operator's page on, so that its 404 here means nginx. */
    const startServe = (port?: number) =>
      startServer({
        command: [process.execPath, "src/bin/serve.ts"],
        env: { DATABASE_URL: fresh.url, STRIPE_WEBHOOK_SECRET: SECRET, ADMIN_TOKEN },
        lifetimeSec: 300,
        port,
      });

    /** Bun's fetch with the throwaway CA: the certificate is checked, for the name `localhost`. */
    const tlsFetch = (request: Request | string, init: RequestInit = {}) => fetch(request, { ...init, tls: { ca } });
    const publicUrl = (path: string) => `https://localhost:${ports.https}${path}`;
    const opsUrl = (path: string) => `http://127.0.0.1:${ports.ops}${path}`;

    /** nginx's logs so far, for failure messages. */
    const nginxLogs = () => {
      const read = (name: string) => {
        try {
          return readFileSync(join(dir, "logs", name), "utf8").slice(-2000);
        } catch {
          return "";
        }
      };
      return `nginx output: ${nginxOutput.slice(-2000)}\nerror.log: ${read("error.log")}`;
    };

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), "webhook-inbox-nginx-"));
      // nginx's workers run as `nobody` when the master is root: they must reach the temporary paths.
      chmodSync(dir, 0o755);
      mkdirSync(join(dir, "logs"));
      mkdirSync(join(dir, "temp"), { mode: 0o755 });
      makeCertificates(dir);
      ca = readFileSync(join(dir, "ca.pem"), "utf8");

      fresh = await freshDatabase();
      servers[0] = await startServe();
      servers[1] = await startServe();
      ports = {
        https: await freePort(),
        ops: await freePort(),
        serve: [Number(new URL(servers[0].base).port), Number(new URL(servers[1].base).port)],
      };
      const conf = join(dir, "nginx.conf");
      writeFileSync(conf, renderConfig(readFileSync(SHIPPED_CONF, "utf8"), dir, ports));

      // -e: the log nginx writes before it has read the file (its built-in path is not ours to write, or not writable).
      const startupLog = join(dir, "logs", "startup.log");
      const check = spawnSync(nginxPath!, ["-t", "-p", dir, "-c", conf, "-e", startupLog, "-g", `pid ${dir}/nginx.pid;`], {
        encoding: "utf8",
      });
      if (check.status !== 0) throw new Error(`nginx -t refuses the rendered docs/deploy/nginx.conf:\n${check.stderr}`);
      nginx = spawn(
        "timeout",
        ["--kill-after=5", "300", nginxPath!, "-p", dir, "-c", conf, "-e", startupLog, "-g", `daemon off; pid ${dir}/nginx.pid;`],
        {
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      nginx.stdout?.on("data", (chunk: Buffer) => (nginxOutput += chunk.toString("utf8")));
      nginx.stderr?.on("data", (chunk: Buffer) => (nginxOutput += chunk.toString("utf8")));
      try {
        await waitUntil(
          "nginx to answer GET /readyz on its ops listener",
          async () => {
            if (nginx?.exitCode !== null || nginx?.signalCode !== null)
              throw new Error(`nginx exited (${nginx?.exitCode ?? nginx?.signalCode})`);
            return fetch(opsUrl("/readyz")).then(
              (r) => r.status === 200,
              () => false,
            );
          },
          { timeoutMs: 15_000, intervalMs: 50 },
        );
      } catch (err) {
        throw new Error(`${err instanceof Error ? err.message : String(err)}\n${nginxLogs()}`);
      }
    }, 90_000);

    afterAll(async () => {
      if (nginx && nginx.exitCode === null && nginx.signalCode === null && nginx.pid !== undefined) {
        const exited = new Promise((resolve) => nginx!.once("exit", resolve));
        // `timeout` passes SIGTERM to nginx and its group (the workers): nginx's fast shutdown.
        process.kill(nginx.pid, "SIGTERM");
        const killer = setTimeout(() => {
          if (nginx?.pid !== undefined && nginx.exitCode === null && nginx.signalCode === null) process.kill(-nginx.pid, "SIGKILL");
        }, 5_000);
        await exited;
        clearTimeout(killer);
      }
      await Promise.all(servers.map((s) => s?.stop(5_000)));
      await fresh?.drop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    }, 30_000);

    test("the shuffled, duplicated lifecycle through TLS and nginx ends with the right rows, spread over both processes; a forged signature gets 400", async () => {
      const summary = await deliver(lifecycle(), {
        url: publicUrl("/webhooks/stripe"),
        secret: SECRET,
        copies: 3,
        shuffle: true,
        seed: 11,
        concurrency: 6,
        retryBaseMs: 50,
        fetch: (request) => tlsFetch(request),
      });
      expect(summary.failures).toEqual([]);
      // The signature is checked by the receiver on the bytes nginx passed on: every one verified.
      expect(summary.outcomes).toEqual({ processed: 11, ignored: 1, duplicate: 24 });
      await expectLifecycleRows(fresh.db);
      // Round robin over the upstream: each process logged deliveries of its own.
      for (const server of servers) expect(server!.output()).toContain('"event_id":"evt_');

      // The client checks nginx's certificate: without the throwaway CA it is refused.
      const untrusted = await fetch(publicUrl("/webhooks/stripe"), { method: "POST", body: "{}" }).then(
        () => "answered",
        () => "refused",
      );
      expect(untrusted).toBe("refused");

      const forged = await signedRequest(
        publicUrl("/webhooks/stripe"),
        eventBody("evt_nginx_forged", "invoice.paid", invoice({ id: "in_nginx_forged", status: "paid", amount_paid: 2000 })),
        { secret: OTHER_SECRET },
      );
      const response = await tlsFetch(forged);
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ error: "signature_mismatch" });
      expect(await inboxRows(fresh.db, ["evt_nginx_forged"])).toEqual([]);
    }, 60_000);

    test("client_max_body_size equals MAX_BODY_BYTES: a body of exactly the limit is recorded, one byte more gets nginx's 413 and writes nothing", async () => {
      const atLimit = sizedEvent("evt_nginx_at_limit", MAX_BODY_BYTES);
      const accepted = await tlsFetch(await signedRequest(publicUrl("/webhooks/stripe"), atLimit));
      expect(accepted.status).toBe(200);
      expect(await accepted.json()).toEqual({ outcome: "ignored", event_id: "evt_nginx_at_limit" });

      const overLimit = sizedEvent("evt_nginx_over_limit", MAX_BODY_BYTES + 1);
      const refused = await tlsFetch(await signedRequest(publicUrl("/webhooks/stripe"), overLimit));
      expect(refused.status).toBe(413);
      // nginx's own page, not the receiver's JSON `payload_too_large`: no process saw the request.
      expect(await refused.text()).toContain("<center>nginx</center>");
      for (const server of servers) expect(server!.output()).not.toContain("evt_nginx_over_limit");
      expect(await inboxRows(fresh.db, ["evt_nginx_at_limit", "evt_nginx_over_limit"])).toEqual(["evt_nginx_at_limit"]);
    }, 30_000);

    test("/admin and /metrics (served by each process) are 404 on the public listener, also through a backslash path; the ops listener answers /healthz and /readyz only", async () => {
      // The processes serve them: a 404 below is nginx's.
      const direct = servers[0]!.base;
      expect((await fetch(`${direct}/metrics`)).status).toBe(200);
      expect((await fetch(`${direct}/admin`)).status).toBe(401);

      for (const path of ["/admin", "/admin/events", "/metrics", "/healthz", "/readyz", "/", "/webhooks/", "/webhooks/stripe/Billing"]) {
        const response = await tlsFetch(publicUrl(path));
        expect({ path, status: response.status }).toEqual({ path, status: 404 });
        await response.arrayBuffer();
      }
      expect((await tlsFetch(publicUrl("/metrics"), { method: "POST", body: "{}" })).status).toBe(404);
      // Sent byte for byte (fetch would normalize them): Bun's URL parser reads `\` as `/`, so behind
      // `location /webhooks/` these reach /metrics and /admin; the example's route pattern refuses them.
      for (const path of ["/webhooks/..\\metrics", "/webhooks/..\\admin", "/webhooks/stripe/..\\..\\metrics", "/webhooks/%2e%2e/metrics"]) {
        expect({ path, status: await rawTlsStatus(ports.https, ca, path) }).toEqual({ path, status: 404 });
      }

      expect((await fetch(opsUrl("/healthz"))).status).toBe(200);
      expect(await (await fetch(opsUrl("/readyz"))).json()).toMatchObject({ status: "ready" });
      for (const [method, path] of [
        ["GET", "/metrics"],
        ["GET", "/admin"],
        ["POST", "/webhooks/stripe"],
      ] as const) {
        const response = await fetch(opsUrl(path), { method, body: method === "POST" ? "{}" : undefined });
        expect({ method, path, status: response.status }).toEqual({ method, path, status: 404 });
      }
    }, 30_000);

    test("with both processes stopped a delivery gets 502 (Stripe retries) and writes nothing; once they are back, the retry is processed", async () => {
      const body = eventBody("evt_nginx_down", "invoice.paid", invoice({ id: "in_nginx_down", status: "paid", amount_paid: 2000 }));
      for (const [i, server] of servers.entries()) {
        expect(await server!.stop()).toBe(0);
        servers[i] = undefined;
      }
      const response = await tlsFetch(await signedRequest(publicUrl("/webhooks/stripe"), body));
      expect(response.status).toBe(502);
      expect(await inboxRows(fresh.db, ["evt_nginx_down"])).toEqual([]);

      // Restarted on the same ports; nginx takes them back once they answer (after fail_timeout at most).
      servers[0] = await startServe(ports.serve[0]);
      servers[1] = await startServe(ports.serve[1]);
      const retry = await deliver([{ name: "evt_nginx_down", body }], {
        url: publicUrl("/webhooks/stripe"),
        secret: SECRET,
        attempts: 12,
        retryBaseMs: 100,
        fetch: (request) => tlsFetch(request),
      });
      expect(retry.failures).toEqual([]);
      expect(retry.outcomes).toEqual({ processed: 1 });
      const [booked] = await fresh.db<{ n: number }[]>`select count(*)::int as n from ledger_entries where invoice_id = 'in_nginx_down'`;
      expect(booked!.n).toBe(1);
    }, 60_000);

    test("300 deliveries, 8 in flight: each process in turn SIGKILLed with deliveries in flight and restarted on its port; nginx passes those on, every delivery is answered 2xx, every 2xx has its row, one booking per paid invoice", async () => {
      const INVOICES = 150;
      // Two Event objects announce each payment (invoice.paid, invoice.payment_succeeded): 300 distinct events.
      const events: EventFile[] = Array.from({ length: INVOICES }, (_, i) => {
        const object = invoice({ id: `in_ngx_${i}`, status: "paid", amount_paid: 2000 });
        return [
          { name: `evt_ngx_paid_${i}`, body: eventBody(`evt_ngx_paid_${i}`, "invoice.paid", object) },
          { name: `evt_ngx_succeeded_${i}`, body: eventBody(`evt_ngx_succeeded_${i}`, "invoice.payment_succeeded", object) },
        ];
      }).flat();

      const acknowledged = new Set<string>();
      const statuses: Record<string, number> = {};
      // One request every 40 ms at most (12 s for 300): the load stays bounded and outlasts both kills.
      let nextSendAt = 0;
      const paced = async (request: Request): Promise<Response> => {
        const id = (JSON.parse(await request.clone().text()) as { id: string }).id;
        const now = Date.now();
        const at = Math.max(now, nextSendAt);
        nextSendAt = at + 40;
        if (at > now) await Bun.sleep(at - now);
        const response = await tlsFetch(request);
        statuses[response.status] = (statuses[response.status] ?? 0) + 1;
        if (response.ok) acknowledged.add(id);
        return response;
      };

      const cutOff = () =>
        (readFileSync(join(dir, "logs", "error.log"), "utf8").match(/upstream prematurely closed|reset by peer/g) ?? []).length;
      const killedAt: number[] = [];
      // Each kill lands while deliveries are certainly in flight in both processes: a transaction of the
      // test holds a SHARE lock on invoices, so every delivery waits in its handler (its inbox row
      // inserted, not committed) until all 8 wait; then one process is SIGKILLed, nginx sees its
      // connections close before an answer and sends those deliveries to the other process (they wait
      // there on the inbox key of the killed process's transactions, which roll back); then the lock is
      // released, well within STATEMENT_TIMEOUT_MS. The second kill waits until nginx sends deliveries to
      // the restarted first process again (after fail_timeout), so one process is always there to take them.
      // Settled to its error (or undefined) at once: a failure is reported after the load, never unhandled.
      const chaos = (async () => {
        await waitUntil("40 deliveries acknowledged", async () => acknowledged.size >= 40, { timeoutMs: 30_000 });
        for (const i of [0, 1] as const) {
          const { promise: release, resolve: releaseLock } = Promise.withResolvers<void>();
          const { promise: locked, resolve: lockTaken } = Promise.withResolvers<void>();
          const holder = fresh.db.begin(async (tx) => {
            await tx`lock table invoices in share mode`;
            lockTaken();
            await release;
          });
          try {
            await locked;
            await waitUntil("8 deliveries waiting on the lock", async () => (await lockWaiters(fresh.db)) >= 8, { timeoutMs: 8_000 });
            const before = cutOff();
            killedAt.push(acknowledged.size);
            await servers[i]!.kill();
            servers[i] = undefined;
            await waitUntil("nginx to see deliveries cut off by the kill", async () => cutOff() > before, { timeoutMs: 5_000 });
          } finally {
            releaseLock();
            await holder;
          }
          servers[i] = await startServe(ports.serve[i]);
          if (i === 0) {
            await waitUntil("nginx to send deliveries to the restarted process", async () => servers[0]!.output().includes('"event_id"'), {
              timeoutMs: 20_000,
            });
          }
        }
      })().then(
        () => undefined,
        (err: unknown) => err,
      );
      const summary = await deliver(events, {
        url: publicUrl("/webhooks/stripe"),
        secret: SECRET,
        concurrency: 8,
        shuffle: true,
        seed: 5,
        attempts: 12,
        retryBaseMs: 100,
        fetch: paced,
      });
      const chaosError = await chaos;
      if (chaosError !== undefined) throw chaosError;

      // Both kills landed while deliveries were still being made, and cut some off in the middle.
      expect(killedAt).toHaveLength(2);
      for (const n of killedAt) expect(n).toBeLessThan(events.length);
      expect(summary.failures).toEqual([]);
      // Those were sent on to the other process (non_idempotent): Stripe would have seen no 5xx at all.
      expect(statuses).toEqual({ "200": events.length });
      // A delivery committed just before a kill and sent on by nginx would be a duplicate; here the lock
      // kept every one in flight uncommitted.
      expect((summary.outcomes.processed ?? 0) + (summary.outcomes.duplicate ?? 0)).toBe(events.length);
      expect(acknowledged.size).toBe(events.length);

      const recorded = new Set(
        await inboxRows(
          fresh.db,
          events.map((e) => e.name),
        ),
      );
      expect([...acknowledged].filter((id) => !recorded.has(id))).toEqual([]);
      const [counts] = await fresh.db<{ invoices: number; paid: number; bookings: number; booked: number; outbox: number }[]>`
      select (select count(*)::int from invoices where id like 'in_ngx_%') as invoices,
             (select count(*)::int from invoices where id like 'in_ngx_%' and status = 'paid') as paid,
             (select count(*)::int from ledger_entries where invoice_id like 'in_ngx_%') as bookings,
             (select count(distinct invoice_id)::int from ledger_entries where invoice_id like 'in_ngx_%' and kind = 'payment') as booked,
             (select count(*)::int from outbox where aggregate_id like 'in_ngx_%') as outbox
    `;
      expect(counts).toEqual({ invoices: INVOICES, paid: INVOICES, bookings: INVOICES, booked: INVOICES, outbox: INVOICES });
    }, 120_000);
  });

/** Writes a throwaway CA (ca.pem) and a certificate for `localhost` it signed (server.pem, server.key) into `dir`. */
function makeCertificates(dir: string): void {
  const ssl = (...args: string[]) => {
    const run = spawnSync("openssl", args, { cwd: dir, encoding: "utf8" });
    if (run.status !== 0) throw new Error(`openssl ${args[0]}: ${run.stderr}`);
  };
  ssl(
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "2",
    "-subj",
    "/CN=webhook-inbox nginx test CA",
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
  );
  ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr");
  writeFileSync(join(dir, "san.ext"), "subjectAltName=DNS:localhost\n");
  ssl(
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-days",
    "2",
    "-extfile",
    "san.ext",
    "-out",
    "server.pem",
  );
}

/** A signed-to-be event body of exactly `bytes` bytes (ASCII), of a type no handler takes (recorded `ignored`). */
function sizedEvent(id: string, bytes: number): string {
  const body = (padding: string) => eventBody(id, "product.updated", { id: "prod_nginx_limit", object: "product", metadata: { padding } });
  const bare = body("").length;
  if (bare > bytes) throw new Error(`An event of ${bytes} bytes cannot be made: the bare event has ${bare}`);
  return body("x".repeat(bytes - bare));
}

/** Sessions of this database waiting for a lock (deliveries held up by the test's lock, or by a transaction holding their inbox key). */
async function lockWaiters(db: Awaited<ReturnType<typeof freshDatabase>>["db"]): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    select count(*)::int as n
      from pg_stat_activity
     where datname = current_database()
       and wait_event_type = 'Lock'
  `;
  return row?.n ?? 0;
}

/** The event ids among `ids` that have an inbox row. */
async function inboxRows(db: Awaited<ReturnType<typeof freshDatabase>>["db"], ids: string[]): Promise<string[]> {
  const rows = await db<{ event_id: string }[]>`select event_id from webhook_inbox where event_id in ${db(ids)} order by event_id`;
  return rows.map((row) => row.event_id);
}

/**
 * The status of `GET <path>` sent byte for byte over TLS to 127.0.0.1:`port` (the certificate checked
 * against `ca` for `localhost`): for paths a URL parser would rewrite before sending.
 */
function rawTlsStatus(port: number, ca: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: "127.0.0.1", port, servername: "localhost", ca }, () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`);
    });
    let answer = "";
    socket.setEncoding("utf8");
    socket.setTimeout(10_000, () => socket.destroy(new Error(`No answer to GET ${path} within 10 s`)));
    socket.on("data", (chunk: string) => (answer += chunk));
    socket.on("error", reject);
    socket.on("close", () => {
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(answer)?.[1];
      if (status === undefined)
        reject(new Error(`No HTTP status line in the answer to GET ${path}: ${JSON.stringify(answer.slice(0, 200))}`));
      else resolve(Number(status));
    });
  });
}
