// `bun run serve`'s start banner: where the webhooks, the operator's page and /metrics are, and
// whether a token guards them, checked against what those URLs answer; never a token's value.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { startBanner } from "../../src/runtime/start-banner.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";
import { freshDatabase, SECRET } from "../support/helpers.ts";

const tracked = new Set<Subprocess>();
const database = await freshDatabase();
afterAll(async () => {
  for (const child of tracked) child.kill("SIGKILL");
  await database.drop();
});

const ADMIN_TOKEN = "adm1n-t0ken-0123456789abcdefghijklmnop";
const METRICS_TOKEN = "metr1cs-t0ken-0123456789";

/** Starts `serve` with `extra`, returns its banner (every line from "listening on" to the metrics line) and base URL, stops it. */
async function banner(extra: Record<string, string>) {
  const serve = spawnBun(
    ["src/bin/serve.ts"],
    { PATH: process.env.PATH, DATABASE_URL: database.url, STRIPE_WEBHOOK_SECRET: SECRET, PORT: "0", ...extra },
    tracked,
  );
  try {
    const listening = await waitForLine(serve, "webhook-inbox listening on", 30_000);
    await waitForLine(serve, "  metrics:", 5_000);
    const base = /listening on (http:\/\/\S+)/.exec(listening)![1]!;
    const answers = {
      admin: (await fetch(`${base}/admin`)).status,
      metrics: (await fetch(`${base}/metrics`)).status,
      metricsWithToken: (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status,
    };
    return { base, lines: serve.lines.slice(serve.lines.indexOf(listening)), answers, all: serve.lines.join("\n") };
  } finally {
    serve.child.kill("SIGTERM");
    await serve.child.exited;
  }
}

test("`bun run serve` prints the admin page URL as on and /metrics as protected when ADMIN_TOKEN and METRICS_TOKEN are set, never the tokens", async () => {
  const { base, lines, answers, all } = await banner({ ADMIN_TOKEN, METRICS_TOKEN, ADMIN_READONLY: "true" });
  expect(lines).toContain(`  admin page: ${base}/admin (on: any user name, ADMIN_TOKEN as the password; read-only: ADMIN_READONLY=true)`);
  expect(lines).toContain(`  metrics: GET ${base}/metrics (protected: Authorization: Bearer <METRICS_TOKEN>)`);
  // What the banner says is what the URLs do: the page asks for the token, /metrics needs its bearer token.
  expect(answers).toEqual({ admin: 401, metrics: 401, metricsWithToken: 200 });
  expect(all).not.toContain(ADMIN_TOKEN);
  expect(all).not.toContain(METRICS_TOKEN);
}, 60_000);

test("`bun run serve` without ADMIN_TOKEN and METRICS_TOKEN prints the admin page as off and /metrics as open", async () => {
  const { base, lines, answers } = await banner({});
  expect(lines).toContain(`  endpoint billing (sync): POST ${base}/webhooks/stripe/billing (also ${base}/webhooks/stripe)`);
  expect(lines).toContain(`  admin page: off (${base}/admin answers 404): set ADMIN_TOKEN (≥ 32 characters) to turn it on`);
  expect(lines).toContain(`  metrics: GET ${base}/metrics (open: no METRICS_TOKEN; keep HOST on a private interface)`);
  expect(answers).toEqual({ admin: 404, metrics: 200, metricsWithToken: 200 });
}, 60_000);

const ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const GITHUB_SECRET = "github-banner-secret-0123";
const PROVIDERS = {
  WEBHOOK_ENDPOINTS: "github/repos,adyen/payments,github/orgs",
  WEBHOOK_SECRET_GITHUB_REPOS: GITHUB_SECRET,
  WEBHOOK_SECRET_GITHUB_ORGS: GITHUB_SECRET,
  WEBHOOK_SECRET_ADYEN_PAYMENTS: ADYEN_KEY,
  INBOX_MODE_ADYEN_PAYMENTS: "async",
  INBOX_MODE_GITHUB_ORGS: "hybrid",
};

test("`bun run serve` lists the WEBHOOK_ENDPOINTS endpoints with provider, name, mode and URL, never a secret", async () => {
  const { base, lines, all } = await banner(PROVIDERS);
  expect(lines.filter((l) => l.startsWith("  endpoint "))).toEqual([
    `  endpoint billing (sync): POST ${base}/webhooks/stripe/billing (also ${base}/webhooks/stripe)`,
    `  endpoint github/repos (sync): POST ${base}/webhooks/github/repos (also ${base}/webhooks/github)`,
    `  endpoint adyen/payments (async): POST ${base}/webhooks/adyen/payments (also ${base}/webhooks/adyen)`,
    `  endpoint github/orgs (hybrid): POST ${base}/webhooks/github/orgs`,
  ]);
  expect(lines).toContain(
    "  worker: async and hybrid endpoints (thin and refetch ones too) queue events that only `bun run worker` applies: run one",
  );
  expect(all).not.toContain(GITHUB_SECRET);
  expect(all).not.toContain(ADYEN_KEY);
}, 60_000);

test("`bun run serve`'s banner names only URLs the receiver serves: an unsigned POST to each is 400, an unconfigured provider's 404", async () => {
  const serve = spawnBun(
    ["src/bin/serve.ts"],
    { PATH: process.env.PATH, DATABASE_URL: database.url, STRIPE_WEBHOOK_SECRET: SECRET, PORT: "0", ...PROVIDERS },
    tracked,
  );
  try {
    const listening = await waitForLine(serve, "webhook-inbox listening on", 30_000);
    await waitForLine(serve, "  metrics:", 5_000);
    const base = /listening on (http:\/\/\S+)/.exec(listening)![1]!;
    const urls = serve.lines.flatMap((l) => [...l.matchAll(/http:\/\/[^\s)]+\/webhooks\/[^\s)]+/g)].map((m) => m[0]));
    expect(urls.length).toBe(7);
    for (const url of urls)
      expect({ url, status: (await fetch(url, { method: "POST", body: "{}" })).status }).toEqual({ url, status: 400 });
    expect((await fetch(`${base}/webhooks/shopify/shop`, { method: "POST", body: "{}" })).status).toBe(404);
  } finally {
    serve.child.kill("SIGTERM");
    await serve.child.exited;
  }
}, 60_000);

test("`startBanner()` without provider endpoints (a config from before WEBHOOK_ENDPOINTS) prints the Stripe lines only", () => {
  const config = {
    endpoints: [{ name: "billing", secrets: [], source: "x", mode: "sync" as const }],
    adminToken: undefined,
    adminReadonly: false,
    metricsToken: undefined,
  };
  expect(startBanner(config, "http://h")).toEqual(startBanner({ ...config, providerEndpoints: [] }, "http://h"));
  expect(startBanner(config, "http://h").filter((l) => l.startsWith("  endpoint "))).toEqual([
    "  endpoint billing (sync): POST http://h/webhooks/stripe/billing (also http://h/webhooks/stripe)",
  ]);
});

test("`bun run serve` refuses an unregistered provider and a malformed provider secret in WEBHOOK_ENDPOINTS with one line each, before it listens", async () => {
  const serve = spawnBun(
    ["src/bin/serve.ts"],
    {
      PATH: process.env.PATH,
      DATABASE_URL: database.url,
      STRIPE_WEBHOOK_SECRET: SECRET,
      PORT: "0",
      WEBHOOK_ENDPOINTS: "gitlab/x,adyen/payments",
      WEBHOOK_SECRET_GITLAB_X: "gitlab-secret-value",
      WEBHOOK_SECRET_ADYEN_PAYMENTS: "not-hex-not-hex-not-hex",
    },
    tracked,
  );
  expect(await serve.child.exited).toBe(1);
  await serve.stdoutDone;
  const stderr = await serve.stderr;
  expect(stderr.trim().split("\n")).toEqual([
    "Invalid configuration:",
    '- WEBHOOK_ENDPOINTS entry "gitlab/x": no provider named "gitlab" is registered (src/providers/registry.ts)',
    "- WEBHOOK_SECRET_ADYEN_PAYMENTS value 1 of 1 is not an Adyen HMAC key (an even number of hex digits, at least 32, as the Customer Area shows it)",
  ]);
  expect(serve.lines.join("\n")).not.toContain("starting on");
});

test("`bun run serve` with NODE_ENV=production and no STRIPE_MODE (nor a key to read it from) refuses to start, naming STRIPE_MODE (the trial's N3)", async () => {
  const env = { PATH: process.env.PATH, NODE_ENV: "production", DATABASE_URL: database.url, STRIPE_WEBHOOK_SECRET: SECRET, PORT: "0" };
  const serve = spawnBun(["src/bin/serve.ts"], env, tracked);
  expect(await serve.child.exited).toBe(1);
  await serve.stdoutDone;
  expect((await serve.stderr).trim().split("\n")).toEqual([
    "Invalid configuration:",
    "- NODE_ENV=production needs a mode: set STRIPE_MODE=live or test (or a STRIPE_API_KEY sk_live_/sk_test_): without one, test-mode events are booked as well",
  ]);
  expect(serve.lines.join("\n")).not.toContain("listening on");
  // With the mode it starts, and says which events it books.
  const { base, lines } = await banner({ NODE_ENV: "production", STRIPE_MODE: "live" });
  expect(lines).toContain(
    `  endpoint billing (sync, live events only): POST ${base}/webhooks/stripe/billing (also ${base}/webhooks/stripe)`,
  );
}, 60_000);
