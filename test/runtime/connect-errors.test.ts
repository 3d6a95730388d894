// The one-shot commands (migrate, billing, inbox) as subprocesses, given a DATABASE_URL they cannot use.
import { expect, test } from "bun:test";
import { join } from "node:path";

const REPO = join(import.meta.dir, "..", "..");
const ADMIN = new URL(process.env.TEST_ADMIN_URL ?? "");
const SECRET = "TOPSECRETPW";

/** The test server's URL with `change` applied (wrong password, other database, parameters…). */
function urlWith(change: (url: URL) => void): string {
  const url = new URL(ADMIN.href);
  change(url);
  return url.href;
}

async function run(script: string, args: string[], databaseUrl: string): Promise<{ code: number | null; stderr: string }> {
  const proc = Bun.spawn([process.execPath, `src/bin/${script}.ts`, ...args], {
    cwd: REPO,
    env: { ...process.env, DATABASE_URL: databaseUrl, DATABASE_POOLER: "none" },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 30_000, // a bound on a hung run, not a speed assertion
  });
  const [stderr] = await Promise.all([new Response(proc.stderr).text(), new Response(proc.stdout).text(), proc.exited]);
  return { code: proc.exitCode, stderr };
}

const CASES: [string, string, RegExp][] = [
  ["a wrong password", urlWith((u) => (u.password = SECRET)), /^Cannot connect to the database: password authentication failed/],
  [
    "a missing database",
    urlWith((u) => (u.pathname = "/no_such_database")),
    /^Cannot connect to the database: database "no_such_database" does not exist/,
  ],
  [
    "an unknown URL parameter",
    urlWith((u) => u.searchParams.set("bogus_setting", "1")),
    /^Cannot connect to the database: unrecognized configuration parameter "bogus_setting"/,
  ],
  // The test server has no TLS: a client that requires it cannot start its session.
  ["a failed TLS handshake", urlWith((u) => u.searchParams.set("sslmode", "require")), /^Cannot connect to the database: .*(SSL|TLS)/],
  ["an sslmode libpq does not know", urlWith((u) => u.searchParams.set("sslmode", "bogus")), /sslmode=bogus is not one of disable, allow/],
];

for (const script of ["migrate", "billing", "inbox"]) {
  const args = script === "inbox" ? ["status"] : [];
  test(`\`${script}\` says it cannot connect (no pooler hint, no migrate hint, no URL) for a wrong password, a missing database, an unknown parameter, a failed TLS handshake`, async () => {
    for (const [what, url, expected] of CASES) {
      const result = await run(script, args, url);
      expect({ what, code: result.code }).toEqual({ what, code: 1 });
      expect(result.stderr.trim()).toMatch(expected);
      expect(result.stderr).not.toContain("pooler");
      expect(result.stderr).not.toContain("migrate` first");
      expect(result.stderr).not.toContain(SECRET);
      expect(result.stderr).not.toContain(ADMIN.host + ADMIN.pathname);
    }
  }, 120_000);
}

test("`migrate` refuses a stray argument with exit 2 before opening any database", async () => {
  const result = await run("migrate", ["extra"], "postgres://nobody:nothing@127.0.0.1:1/none");
  expect(result.code).toBe(2);
  expect(result.stderr).toStartWith('migrate takes no arguments, got "extra"');
  expect(result.stderr).toContain("Usage: bun run migrate");
});
