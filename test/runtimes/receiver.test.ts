// loadServerConfig(): the settings of every entry file that needs DATABASE_URL (Deno, Node.js, workerd).
import { describe, expect, test } from "bun:test";
import { ConfigError } from "../../src/config.ts";
import { loadServerConfig } from "../../src/runtime/receiver.ts";
import { SECRET } from "../support/helpers.ts";

const DB_URL = "postgres://app:pw@db.internal:6432/inbox";

function problems(env: Record<string, string | undefined>): string[] {
  try {
    loadServerConfig(env, "Deno");
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error("loadServerConfig() accepted the environment");
}

describe("loadServerConfig()", () => {
  test("`loadServerConfig()` returns loadConfig()'s settings with the database URL and the pooler", () => {
    const config = loadServerConfig(
      { DATABASE_URL: DB_URL, DATABASE_POOLER: "transaction", STRIPE_WEBHOOK_SECRET: SECRET, PORT: "8080" },
      "Deno",
    );
    expect(config).toMatchObject({ databaseUrl: DB_URL, databasePooler: "transaction", port: 8080 });
  });

  test("`loadServerConfig()` requires DATABASE_URL, listed first with every other problem", () => {
    expect(problems({ STRIPE_WEBHOOK_SECRET: SECRET })).toEqual([
      "DATABASE_URL is required on Deno (only `bun run serve` starts an embedded PostgreSQL)",
    ]);
    expect(problems({ PORT: "x" })).toEqual([
      "DATABASE_URL is required on Deno (only `bun run serve` starts an embedded PostgreSQL)",
      "STRIPE_WEBHOOK_SECRET is required (the billing endpoint's whsec_… signing secret)",
      'PORT must be an integer from 0 to 65535, got "x"',
    ]);
  });

  test("`loadServerConfig()` with NODE_ENV=production names the missing DATABASE_URL once", () => {
    expect(problems({ NODE_ENV: "production", STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_MODE: "live" })).toEqual([
      "DATABASE_URL is required on Deno (only `bun run serve` starts an embedded PostgreSQL)",
    ]);
  });
});

test("`bun run serve:workerd` refuses bad settings at start (exit 1, every problem named), not at the first webhook", async () => {
  const child = Bun.spawn([process.execPath, "src/adapter/workerd/miniflare.ts"], {
    cwd: new URL("../..", import.meta.url).pathname,
    env: {
      PATH: process.env.PATH ?? "",
      DATABASE_URL: DB_URL,
      STRIPE_WEBHOOK_SECRET: SECRET,
      STRIPE_TOLERANCE_SEC: "0",
      STATEMENT_TIMEOUT_MS: "abc",
      PORT: "0",
    },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 30_000,
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  expect(code).toBe(1);
  expect(stdout).not.toContain("listening");
  expect(stderr).toContain("STRIPE_TOLERANCE_SEC");
  expect(stderr).toContain("STATEMENT_TIMEOUT_MS");
}, 40_000);
