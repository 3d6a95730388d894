// `bun run serve`'s start banner: where the webhooks, the operator's page and /metrics are, and
// whether a token guards them, checked against what those URLs answer; never a token's value.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
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
