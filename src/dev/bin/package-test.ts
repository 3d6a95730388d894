// Entry file: `bun run test:package` (run by .ci/run): the package as a new app gets it. Packs this
// checkout (`npm pack`, which builds dist/), installs the tarball into an empty app in a temporary folder
// outside the repository (`bun add`), runs `webhook-inbox init`, the app's `bun test`, `migrate` and
// `serve`, delivers the scaffold's signed customer.created and checks the customers row; then, under
// Node.js, imports the package and runs `serve` with a JavaScript configuration, delivers a second
// customer and checks its row. Loopback only; every process it starts is stopped by its pid.
// Exit 0 when every step passed, 1 at the first that did not (its output printed).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { signStripePayload } from "../../providers/stripe.ts";
import { freePort } from "../../runtime/embedded-postgres.ts";
import { devDatabaseUrl } from "../../runtime/dev-database.ts";

/** A configuration Node.js 20 can import: the scaffold's handler, in JavaScript. */
const NODE_CONFIG = `import { defineConfig, handlerTable } from "webhook-inbox";

export default defineConfig({
  handlers: {
    stripe: handlerTable({
      "customer.created": async (tx, customer, { account, eventId }) => {
        await tx\`
          insert into customers (account, id, email, name, created_at, event_id)
          values (\${account}, \${String(customer.id)}, \${customer.email ?? null}, \${customer.name ?? null},
                  to_timestamp(\${Number(customer.created)}), \${eventId})
          on conflict (account, id) do nothing
        \`;
      },
    }),
  },
  migrations: "migrations",
});
`;

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const SECRET = "whsec_package_test_secret";
const started = Date.now();
const work = mkdtempSync(join(tmpdir(), "webhook-inbox-package-"));
// As root the embedded PostgreSQL runs as the OS user `postgres`, which must reach the app's .data/.
chmodSync(work, 0o755);
const app = join(work, "app");
const children: ChildProcess[] = [];
const pgPort = await freePort();
const env: NodeJS.ProcessEnv = { ...process.env, EMBEDDED_PG_PORT: String(pgPort), STRIPE_WEBHOOK_SECRET: SECRET, NODE_ENV: "development" };
delete env.DATABASE_URL;

try {
  step("npm pack");
  const packed = run("npm", ["pack", "--pack-destination", work, "--json"], ROOT, 300_000);
  // The prepack script (the build) prints before npm's JSON, which starts at the last line "[".
  const json = packed.slice(packed.lastIndexOf("\n[") + 1);
  const tarball = join(work, (JSON.parse(json) as { filename: string }[])[0]?.filename ?? "");

  step("an empty app: bun add the tarball");
  run("mkdir", ["-p", app], work);
  chmodSync(app, 0o755);
  writeFileSync(join(app, "package.json"), `${JSON.stringify({ name: "webhook-app", private: true, type: "module" }, null, 2)}\n`);
  run("bun", ["add", tarball], app, 300_000);

  const bin = join(app, "node_modules", ".bin", "webhook-inbox");
  step("webhook-inbox init");
  run(bin, ["init"], app);

  step("the app's bun test (the package's contract suite on an embedded PostgreSQL)");
  const tested = run("bun", ["test"], app, 600_000, { ...env, STRIPE_WEBHOOK_SECRET: "" }, true);
  // The fixture check and three modes, one test each: a suite that found or ran fewer did not test the contract.
  if (!/\b4 pass\b/.test(tested) || !/\b0 fail\b/.test(tested)) throw new Error(`the app's bun test did not pass its 4 tests:\n${tested}`);
  console.log(tested.trim().split("\n").filter((l) => /pass|fail|Ran/.test(l)).join("\n"));

  step("webhook-inbox migrate");
  console.log(run(bin, ["migrate"], app, 180_000, env).trim());

  step("webhook-inbox serve, and the scaffold's customer.created delivered");
  const port = await freePort();
  const server = await startServer(bin, ["serve"], { ...env, PORT: String(port) });
  const fixture = readFileSync(join(app, "fixtures", "customer.created.json"), "utf8");
  await expectProcessed(port, fixture, "evt_1SlC4dLgUG5tbmjcCu5tCrtd");
  await stop(server);
  const db = postgres(devDatabaseUrl(pgPort), { max: 1, onnotice: () => {} });
  try {
    await expectRow(db, "cus_TiC4WQ3xFz9aLm", "ada@example.com");

    step("Node.js: import webhook-inbox");
    const imported = run(
      "node",
      ["--input-type=module", "-e", "const m = await import('webhook-inbox'); m.assertPatchedPostgres(); console.log(typeof m.createApp, m.PACKAGE_VERSION)"],
      app,
    );
    if (!imported.startsWith("function ")) throw new Error(`node import printed ${imported}`);
    console.log(`  ${imported.trim()}`);

    step("Node.js: webhook-inbox serve with a JavaScript configuration");
    writeFileSync(join(app, "webhook-inbox.config.mjs"), NODE_CONFIG);
    const nodePort = await freePort();
    const nodeServer = await startServer(
      "node",
      [join(app, "node_modules", "webhook-inbox", "dist", "bin", "webhook-inbox.js"), "serve", "--config", "webhook-inbox.config.mjs"],
      { ...env, PORT: String(nodePort), DATABASE_URL: devDatabaseUrl(pgPort) },
    );
    const second = fixture.replaceAll("evt_1SlC4dLgUG5tbmjcCu5tCrtd", "evt_1SlC9zLgUG5tbmjcNodeTest1").replaceAll("cus_TiC4WQ3xFz9aLm", "cus_TiC9NodeServe01").replace("ada@example.com", "grace@example.com");
    await expectProcessed(nodePort, second, "evt_1SlC9zLgUG5tbmjcNodeTest1");
    await stop(nodeServer);
    await expectRow(db, "cus_TiC9NodeServe01", "grace@example.com");
  } finally {
    await db.end({ timeout: 1 });
  }
  console.log(`\npackage test passed in ${Math.round((Date.now() - started) / 1000)} s`);
} catch (err) {
  console.error(`\npackage test FAILED: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
} finally {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  spawnSync(join(app, "node_modules", ".bin", "webhook-inbox"), ["db", "stop"], { cwd: app, env, stdio: "ignore", timeout: 60_000 });
  rmSync(work, { recursive: true, force: true });
}

function step(name: string): void {
  console.log(`\n== ${name} (${Math.round((Date.now() - started) / 1000)} s)`);
}

/** Runs a command to its end and returns its stdout (and its stderr after it, `withStderr`). @throws Error with its output on a non-zero exit. */
function run(command: string, args: string[], cwd: string, timeout = 120_000, environment: NodeJS.ProcessEnv = env, withStderr = false): string {
  const r = spawnSync(command, args, { cwd, env: environment, encoding: "utf8", timeout, maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0)
    throw new Error(`${command} ${args.join(" ")} exited ${r.status ?? r.signal ?? r.error?.message}\n${r.stdout ?? ""}\n${r.stderr ?? ""}`);
  return withStderr ? `${r.stdout}\n${r.stderr}` : r.stdout;
}

/** Starts a server command and resolves once it printed "listening on"; its output is kept for errors. */
function startServer(command: string, args: string[], environment: NodeJS.ProcessEnv): Promise<ChildProcess> {
  const child = spawn(command, args, { cwd: app, env: environment, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let output = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} ${args.join(" ")} did not listen within 120 s:\n${output}`)), 120_000);
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      if (/listening on/.test(output)) {
        clearTimeout(timer);
        resolve(child);
      }
    };
    child.stdout?.on("data", read);
    child.stderr?.on("data", read);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} ${args.join(" ")} exited ${code}:\n${output}`));
    });
  });
}

/** SIGTERM to the server's pid, and waits for it to exit. */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

async function expectProcessed(port: number, body: string, eventId: string): Promise<void> {
  const signature = await signStripePayload(body, SECRET, Math.floor(Date.now() / 1000));
  const res = await fetch(`http://127.0.0.1:${port}/webhooks/stripe`, {
    method: "POST",
    headers: { "content-type": "application/json", "stripe-signature": signature },
    body,
  });
  const answer = await res.text();
  if (res.status !== 200 || JSON.parse(answer).outcome !== "processed" || JSON.parse(answer).event_id !== eventId)
    throw new Error(`delivery of ${eventId} answered ${res.status} ${answer}`);
  console.log(`  ${eventId}: ${res.status} ${answer}`);
}

async function expectRow(db: postgres.Sql, id: string, email: string): Promise<void> {
  const rows = await db<{ id: string; email: string }[]>`select id, email from customers where id = ${id}`;
  const inbox = await db<{ outcome: string }[]>`
    select outcome from webhook_inbox where provider = 'stripe' and endpoint = 'billing' and event_id in (
      select event_id from customers where id = ${id})
  `;
  if (rows.length !== 1 || rows[0]?.email !== email || inbox[0]?.outcome !== "processed")
    throw new Error(`customers row for ${id}: ${JSON.stringify(rows)}, inbox ${JSON.stringify(inbox)}`);
  console.log(`  customers row ${id} (${email}), inbox row processed`);
}

