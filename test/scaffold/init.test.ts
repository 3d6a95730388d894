// `webhook-inbox init` and the contract suite it scaffolds, run as an app runs them: the scaffold is
// written by the command into a folder of its own, then its `bun test` runs in that folder (its
// "webhook-inbox" imports resolve to this checkout's src through tsconfig.json paths), on scratch
// databases of the suite's server. The packed tarball in an app outside the repository is
// `bun run test:package` (.ci/run).
import { afterAll, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const CLI = join(ROOT, "src", "bin", "webhook-inbox.ts");
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function scaffold(): string {
  const dir = join(ROOT, "test", `.scaffold-${process.pid}-${dirs.length}`);
  dirs.push(dir);
  mkdirSync(dir, { recursive: true });
  const r = spawnSync(process.execPath, [CLI, "init"], { cwd: dir, encoding: "utf8" });
  expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: "" });
  return dir;
}

/** A test that runs the scaffold's own `bun test` (a process, its own server connections): 1 s alone, more beside other files. */
const APP_TEST_MS = 120_000;

/** The scaffold's own `bun test`, in its folder, on the suite's PostgreSQL server. */
function appTest(dir: string) {
  return spawnSync(process.execPath, ["test"], {
    cwd: dir,
    encoding: "utf8",
    timeout: 180_000,
    env: { ...process.env, DATABASE_URL: process.env.TEST_ADMIN_URL },
  });
}

test("`webhook-inbox init` writes the configuration, handler, migration, fixture and contract test, with package.json scripts, and never overwrites", () => {
  const dir = scaffold();
  for (const f of [
    "webhook-inbox.config.ts",
    "handlers/customers.ts",
    "migrations/0001_customers.sql",
    "fixtures/customer.created.json",
    "test/contract.test.ts",
  ])
    expect(existsSync(join(dir, f))).toBe(true);
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  expect(pkg.type).toBe("module");
  expect(pkg.scripts.serve).toBe("webhook-inbox serve");
  expect(readFileSync(join(dir, ".gitignore"), "utf8")).toContain(".data/");
  const handler = join(dir, "handlers", "customers.ts");
  writeFileSync(handler, "// the app's own edit\n");
  const again = spawnSync(process.execPath, [CLI, "init"], { cwd: dir, encoding: "utf8" });
  expect(again.status).toBe(1);
  expect(again.stderr).toContain("webhook-inbox.config.ts, handlers/customers.ts");
  expect(readFileSync(handler, "utf8")).toBe("// the app's own edit\n");
}, 30_000);

test(
  "the scaffold's contract test passes in sync, async and hybrid mode, its customers row written once each",
  () => {
    const r = appTest(scaffold());
    const out = `${r.stdout}\n${r.stderr}`;
    expect(out).toContain("webhook-inbox contract, sync mode");
    expect(out).toContain("webhook-inbox contract, hybrid mode");
    expect(out).toMatch(/\b4 pass\b/);
    expect({ status: r.status, fail: /\b0 fail\b/.test(out) }).toEqual({ status: 0, fail: true });
  },
  APP_TEST_MS,
);

test(
  "the contract suite fails an app whose handler leaves the wrong end state (its email upper-cased), in every mode",
  () => {
    const dir = scaffold();
    const handler = join(dir, "handlers", "customers.ts");
    writeFileSync(
      handler,
      readFileSync(handler, "utf8").replace("(customer.email as string | null) ?? null", "String(customer.email).toUpperCase()"),
    );
    const r = appTest(dir);
    const out = `${r.stdout}\n${r.stderr}`;
    expect(r.status).toBe(1);
    expect(out).toContain("ADA@EXAMPLE.COM");
    expect(out).toMatch(/\b3 fail\b/);
  },
  APP_TEST_MS,
);

test(
  "the contract suite fails an app whose handler books again when an event is replayed (an append-only insert), in every mode",
  () => {
    const dir = scaffold();
    const migration = join(dir, "migrations", "0001_customers.sql");
    writeFileSync(
      migration,
      readFileSync(migration, "utf8").replace("primary key (account, id)", "seq bigint generated always as identity primary key"),
    );
    const handler = join(dir, "handlers", "customers.ts");
    writeFileSync(handler, readFileSync(handler, "utf8").replace("on conflict (account, id) do nothing", ""));
    const r = appTest(dir);
    const out = `${r.stdout}\n${r.stderr}`;
    expect(r.status).toBe(1);
    // Delivered three times (duplicates, concurrent) the row is written once: the inbox key holds. The replay adds a second.
    expect(out).toMatch(/\b3 fail\b/);
    expect(out).toContain("webhook-inbox contract, sync mode");
    expect(out).toMatch(/customers/);
  },
  APP_TEST_MS,
);

test(
  "the contract suite fails an app whose table names an event type no fixture has (a misspelt type never runs)",
  () => {
    const dir = scaffold();
    const handler = join(dir, "handlers", "customers.ts");
    writeFileSync(handler, readFileSync(handler, "utf8").replace("handlerTable({", 'handlerTable({\n  "customer.delted": async () => {},'));
    const r = appTest(dir);
    const out = `${r.stdout}\n${r.stderr}`;
    expect(r.status).toBe(1);
    expect(out).toContain("customer.delted");
    expect(out).toMatch(/\b1 fail\b/);
  },
  APP_TEST_MS,
);
