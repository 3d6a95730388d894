// TLS to PostgreSQL: DATABASE_URL's libpq-style `sslmode` and `sslrootcert` against a PostgreSQL with
// `ssl=on` and a certificate from a throwaway CA (openssl, Debian's package), on Bun in this process
// and through a real command (`bun run migrate`): verify-full with the right CA connects over TLS; a
// wrong CA, a wrong host name or an unreadable CA file is refused with one line naming the cause.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { connectDatabase } from "../../src/runtime/database-tls.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../src/runtime/embedded-postgres.ts";
import { createRequire } from "node:module";
import postgres from "postgres";
import { binaryRequired } from "../support/support-binary.ts";
import { SECRET } from "../support/helpers.ts";
import { startServer } from "../runtimes/server-process.ts";

const ROOT = join(import.meta.dir, "..", "..");

let openssl = "";
let dir = "";
let dataDir = "";
let server: EmbeddedServer | undefined;

/** Runs openssl with `args` in the certificate folder; throws with its stderr on failure. */
function ssl(...args: string[]): void {
  const run = spawnSync(openssl, args, { cwd: dir, encoding: "utf8" });
  if (run.status !== 0) throw new Error(`openssl ${args[0]}: ${run.stderr}`);
}

/** A self-signed CA named `name`: name.key, name.pem. */
function makeCa(name: string): void {
  ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", `/CN=${name}`, "-keyout", `${name}.key`, "-out", `${name}.pem`);
}

/** The server URL with `params`, for host `host` (the certificate names `localhost` only). */
const url = (params: string, host = "localhost") => `postgres://postgres:postgres@${host}:${server!.port}/postgres?${params}`;

/** `bun run migrate` against `databaseUrl`: exit code and stderr. */
function migrate(databaseUrl: string): { status: number | null; stderr: string } {
  const run = spawnSync(process.execPath, ["src/bin/migrate.ts"], {
    cwd: ROOT,
    encoding: "utf8",
    env: { ...process.env, DATABASE_URL: databaseUrl, DATABASE_WAIT_MS: "3000" },
    timeout: 60_000,
  });
  return { status: run.status, stderr: run.stderr };
}

// openssl has no --version (support-binary's probe), so it is found with `openssl version`.
const hasOpenssl = spawnSync("openssl", ["version"], { stdio: "ignore" }).status === 0;
if (!hasOpenssl) {
  const missing = "openssl is not installed: `apt-get install openssl` runs these tests";
  if (binaryRequired("openssl"))
    test("openssl is required here (CI or REQUIRE_OPENSSL=1)", () => {
      throw new Error(missing);
    });
  else test.skip(missing, () => {});
}

describe.if(hasOpenssl)("TLS to PostgreSQL", () => {
  beforeAll(async () => {
    openssl = "openssl";
    dir = mkdtempSync(join(tmpdir(), "webhook-inbox-tls-"));
    chmodSync(dir, 0o755);
    makeCa("ca");
    makeCa("other-ca");
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr");
    writeFileSync(join(dir, "san.ext"), "subjectAltName=DNS:localhost\n");
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem");
    // PostgreSQL reads the key as its own OS user (`postgres` when this runs as root) and refuses a key others can read.
    if (process.getuid?.() === 0) spawnSync("chown", ["postgres:", join(dir, "server.key"), join(dir, "server.pem")]);
    chmodSync(join(dir, "server.key"), 0o600);
    dataDir = await temporaryDataDir();
    server = await startEmbeddedPostgres({
      dir: dataDir,
      port: 0,
      flags: ["-c", "ssl=on", "-c", `ssl_cert_file=${join(dir, "server.pem")}`, "-c", `ssl_key_file=${join(dir, "server.key")}`, "-c", "fsync=off"],
    });
    // Three RSA keys and an initdb: far past the 5 s default hook bound on a busy 2-core machine.
  }, 120_000);

  afterAll(async () => {
    await server?.stop();
    if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Whether the session `databaseUrl` opens is encrypted, from the server's own view (pg_stat_ssl). */
  async function encrypted(databaseUrl: string): Promise<boolean> {
    const db = connectDatabase(databaseUrl, { max: 1 });
    try {
      const [row] = await db<{ ssl: boolean }[]>`select ssl from pg_stat_ssl where pid = pg_backend_pid()`;
      return row!.ssl;
    } finally {
      await db.end({ timeout: 5 });
    }
  }

  test("verify-full with the CA in sslrootcert connects over TLS; require without a CA encrypts without checking; no sslmode stays plain", async () => {
    expect(await encrypted(url(`sslmode=verify-full&sslrootcert=${join(dir, "ca.pem")}`))).toBe(true);
    expect(await encrypted(url(`sslrootcert=${join(dir, "ca.pem")}`))).toBe(true); // libpq: a root certificate means verify-ca
    expect(await encrypted(url("sslmode=require", "127.0.0.1"))).toBe(true);
    expect(await encrypted(url("application_name=plain"))).toBe(false);
  });

  test("a real command with the right CA migrates; with another CA, a wrong host name or a missing CA file it exits 1 with one line naming the cause", () => {
    const ok = migrate(url(`sslmode=verify-full&sslrootcert=${join(dir, "ca.pem")}`));
    expect(ok.stderr).toBe("");
    expect(ok.status).toBe(0);

    const wrongCa = migrate(url(`sslmode=verify-full&sslrootcert=${join(dir, "other-ca.pem")}`));
    expect(wrongCa.status).toBe(1);
    expect(wrongCa.stderr.trim().split("\n")).toHaveLength(1);
    expect(wrongCa.stderr).toContain("TLS certificate not accepted");

    const wrongHost = migrate(url(`sslmode=verify-full&sslrootcert=${join(dir, "ca.pem")}`, "127.0.0.1"));
    expect(wrongHost.status).toBe(1);
    expect(wrongHost.stderr.trim().split("\n")).toHaveLength(1);
    expect(wrongHost.stderr).toContain("TLS certificate not accepted");
    expect(wrongHost.stderr).toContain("127.0.0.1");

    const missing = migrate(url(`sslmode=verify-full&sslrootcert=${join(dir, "nope.pem")}`));
    expect(missing.status).toBe(1);
    expect(missing.stderr.trim()).toBe(`Cannot read sslrootcert ${join(dir, "nope.pem")} named in DATABASE_URL: ENOENT`);
    for (const run of [wrongCa, wrongHost, missing]) expect(run.stderr).not.toContain("postgres:postgres");
  });

  test("`serve` on Deno and on Node.js connects with verify-full and the CA file: ready, and every one of its sessions encrypted", async () => {
    const build = spawnSync(process.execPath, ["run", "build:node"], { cwd: ROOT, encoding: "utf8" });
    if (build.status !== 0) throw new Error(`bun run build:node failed:\n${build.stderr}`);
    const deno = (createRequire(import.meta.url)("deno/install_api.cjs") as { runInstall(): string }).runInstall();
    const ca = join(dir, "ca.pem");
    const runtimes = [
      { name: "deno", command: [deno, "run", "--allow-net", "--allow-env", `--allow-read=sql,${ca}`, "src/adapter/deno/serve.ts"] },
      { name: "node", command: ["node", "dist/node/serve.mjs"] },
    ];
    const admin = postgres(url("sslmode=require", "127.0.0.1"), { max: 1, onnotice: () => {} });
    try {
      for (const runtime of runtimes) {
        const server = await startServer({
          command: runtime.command,
          env: {
            DATABASE_URL: url(`sslmode=verify-full&sslrootcert=${ca}`),
            STRIPE_WEBHOOK_SECRET: SECRET,
            DENO_NO_UPDATE_CHECK: "1",
            NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/",
          },
        });
        try {
          const sessions = await admin<{ ssl: boolean }[]>`
            select s.ssl from pg_stat_ssl s join pg_stat_activity a using (pid)
             where a.application_name like ${`webhook-inbox ${runtime.name}%`}`;
          expect({ runtime: runtime.name, sessions: sessions.length > 0, allEncrypted: sessions.every((r) => r.ssl) }).toEqual({
            runtime: runtime.name,
            sessions: true,
            allEncrypted: true,
          });
        } finally {
          await server.stop();
        }
      }
    } finally {
      await admin.end();
    }
  }, 120_000);
});
