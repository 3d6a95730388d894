// `reconcile github` against real PostgreSQL and the fake GitHub API (src/dev/fake-github/), whose
// redelivery posts the signed delivery to a real receiver (createApp): failed deliveries the inbox
// lacks are redelivered once and then recorded, recorded ones are left alone, pages are followed,
// --dry-run asks for nothing, a wrong token is one line that never shows it.
import { afterAll, beforeEach, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { connect } from "../../src/db/db.ts";
import { startFakeGitHub } from "../../src/dev/fake-github/serve.ts";
import { FakeGitHubStore } from "../../src/dev/fake-github/store.ts";
import { readProviderFixtures, signDelivery } from "../../src/dev/provider-delivery.ts";
import { gitHubHandlers } from "../../src/handlers/github-pushes.ts";
import { gitHubProvider } from "../../src/providers/github.ts";
import { createApp } from "../../src/receiver/app.ts";
import { reconcileGitHubCommand, type GitHubReconcileSummary } from "../../src/reconcile/github-command.ts";
import { readGitHubHook } from "../../src/reconcile/github-hook-api.ts";
import { spawnBun } from "../support/bun-child.ts";
import { FIXTURES_DIR, freshDatabase } from "../support/helpers.ts";

const TOKEN = "ghp_fakeToken0123456789abcdefABCDEF0123";
const HOOK = "repos/acme/shop/hooks/7";
const SECRET = "github-dev-secret";
const fresh = await freshDatabase();
const db = fresh.db;
const store = new FakeGitHubStore(TOKEN);
const fake = startFakeGitHub({ store });
const tracked = new Set<Subprocess>();
const ENV = {
  WEBHOOK_ENDPOINTS: "github/repos,shopify/shop",
  GITHUB_HOOK_REPOS: HOOK,
  GITHUB_TOKEN_REPOS: TOKEN,
  GITHUB_API_BASE: fake.url,
};
afterAll(async () => {
  for (const child of tracked) child.kill("SIGKILL");
  await fake.stop();
  await fresh.drop();
});

const fixtures = readProviderFixtures([join(FIXTURES_DIR, "github")]);
const byGuid = new Map(fixtures.map((f) => [f.headers["X-GitHub-Delivery"]!, f]));
const guid = (name: string) => fixtures.find((f) => f.name === name)!.headers["X-GitHub-Delivery"]!;
const PUSH_MAIN = guid("push-main.json");
const PUSH_FEATURE = guid("push-feature.json");
const ISSUES = guid("issues-opened.json");
const PING = guid("ping.json");
const app = createApp({
  db,
  endpoints: [{ name: "repos", provider: gitHubProvider, secrets: [SECRET], handlers: gitHubHandlers, isDefault: true, mode: "sync" }],
  log: () => {},
});
/** GitHub sending a fixture's delivery to the receiver, as it does on a redelivery (same X-GitHub-Delivery). */
async function deliver(id: string): Promise<number> {
  const signed = await signDelivery("github", byGuid.get(id)!, SECRET, 0);
  const res = await app.fetch(
    new Request("http://receiver.test/webhooks/github/repos", { method: "POST", headers: signed.headers, body: signed.body }),
  );
  await res.body?.cancel();
  return res.status;
}

const ago = (ms: number) => new Date(Date.now() - ms).toISOString();
const HOUR = 3_600_000;

beforeEach(async () => {
  await db`truncate webhook_inbox, outbox restart identity`;
  store.hooks.clear();
  store.redelivered.length = 0;
  store.requests.length = 0;
  store.redeliver = (_hook, d) => deliver(d.guid);
  // Oldest first: a failure too old for --since 3d, then the push to main failing (503) behind 150 good
  // deliveries (so it is on the second page of 100), the issue failing and later redelivered by hand (it is
  // in the inbox), the feature push failing twice (the original and a failed redelivery), the ping fine.
  store.add(HOOK, { guid: "0ld-failure", delivered_at: ago(100 * HOUR), status_code: 500 });
  const main = store.add(HOOK, { guid: PUSH_MAIN, delivered_at: ago(50 * HOUR), status_code: 503 });
  for (let i = 0; i < 150; i++) store.add(HOOK, { guid: `fine-${i}`, delivered_at: ago(40 * HOUR - i * 1000), status_code: 200 });
  store.add(HOOK, { guid: ISSUES, event: "issues", action: "opened", delivered_at: ago(30 * HOUR), status_code: 0, status: "timed out" });
  expect(await deliver(ISSUES)).toBe(200);
  store.add(HOOK, { guid: ISSUES, event: "issues", action: "opened", delivered_at: ago(29 * HOUR), status_code: 200, redelivery: true });
  store.add(HOOK, { guid: PUSH_FEATURE, delivered_at: ago(20 * HOUR), status_code: 500 });
  store.add(HOOK, { guid: PUSH_FEATURE, delivered_at: ago(19 * HOUR), status_code: 502, redelivery: true });
  store.add(HOOK, { guid: PING, event: "ping", delivered_at: ago(HOUR), status_code: 200 });
  expect(main.id).toBeGreaterThan(0);
});

/** Runs the command in-process on its own connection; output captured. */
async function reconcile(args: string[], env: Record<string, string | undefined> = ENV) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await reconcileGitHubCommand(args, env, {
    async openDb() {
      const own = connect(fresh.url, { max: 1, applicationName: "reconcile-github-test" });
      return { db: own, close: () => own.end({ timeout: 5 }) };
    },
    out: (l) => out.push(l),
    err: (l) => err.push(l),
  });
  return { code, out, err, json: () => JSON.parse(out.join("\n")) as GitHubReconcileSummary & { exitCode: number } };
}

const inbox = async () => [...(await db`select event_id, event_type, outcome from webhook_inbox order by event_id`)];
const idOf = (g: string, failedOnly = true) =>
  store.hooks
    .get(HOOK)!
    .filter((d) => d.guid === g && (!failedOnly || d.status_code !== 200))
    .at(-1)!.id;

test("`reconcileGitHubCommand()` redelivers each failed delivery the inbox lacks once, across pages, and a second run finds nothing to do", async () => {
  const first = await reconcile(["--endpoint", "repos"]);
  expect(first.err).toEqual([]);
  expect(first.code).toBe(1);
  // The newest failed attempt of each missing guid, oldest guid first; never the recorded issue, the old one, or a 2xx.
  expect(store.redelivered).toEqual([idOf(PUSH_MAIN), idOf(PUSH_FEATURE)]);
  expect(first.out.filter((l) => l.startsWith("redelivered ")).map((l) => l.split(" ")[1])).toEqual([PUSH_MAIN, PUSH_FEATURE]);
  expect(first.out.at(-1)).toMatch(/^github\/repos: 156 deliveries in 2 page\(s\) since .*: 3 failed, 1 already recorded, redelivered 2$/);
  // Pagination followed GitHub's Link header: the second page was asked for with its cursor.
  const lists = store.requests.filter((r) => r.method === "GET");
  expect(lists.length).toBe(2);
  expect(lists[1]!.path).toContain("cursor=");
  // The redeliveries reached the receiver: both pushes are recorded and applied.
  expect(await inbox()).toEqual(
    [
      { event_id: ISSUES, event_type: "issues.opened", outcome: "ignored" },
      { event_id: PUSH_MAIN, event_type: "push", outcome: "processed" },
      { event_id: PUSH_FEATURE, event_type: "push", outcome: "processed" },
    ].sort((a, b) => (a.event_id < b.event_id ? -1 : 1)),
  );

  const second = await reconcile(["--json"]);
  expect(second.code).toBe(0);
  expect(second.json()).toMatchObject({ exitCode: 0, endpoint: "repos", failed: 3, alreadyRecorded: 3, redelivered: [], refused: [] });
  expect(store.redelivered.length).toBe(2);
});

test("`reconcileGitHubCommand()` with --dry-run asks GitHub for nothing and writes nothing, but says what it would redeliver (exit 1)", async () => {
  const before = await inbox();
  const run = await reconcile(["--dry-run", "--since", "60h"]);
  expect(run.code).toBe(1);
  expect(run.out.filter((l) => l.startsWith("would redeliver ")).map((l) => l.split(" ")[2])).toEqual([PUSH_MAIN, PUSH_FEATURE]);
  expect(store.redelivered).toEqual([]);
  expect(store.requests.filter((r) => r.method === "POST")).toEqual([]);
  expect(await inbox()).toEqual(before);
  // --since narrows the window: a day back, only the feature push is due.
  const day = await reconcile(["--dry-run", "--since=24h", "--json"]);
  expect(day.json().redelivered.map((r) => r.guid)).toEqual([PUSH_FEATURE]);
});

test("`reconcileGitHubCommand()` with a wrong token prints one line naming the variable, never the token, and exits 1", async () => {
  const wrong = "ghp_wrongToken9876543210zyxwvuZYXWVU9876";
  const run = await reconcile([], { ...ENV, GITHUB_TOKEN_REPOS: wrong });
  expect(run.code).toBe(1);
  expect(run.out).toEqual([]);
  expect(run.err).toEqual([
    `github/repos: cannot list the hook's deliveries: GitHub refused GITHUB_TOKEN_REPOS: GET /${HOOK}/deliveries answered 401 "Bad credentials" (a wrong or expired token)`,
  ]);
  expect(run.err.join("\n")).not.toContain(wrong);
  expect(store.redelivered).toEqual([]);
});

test("`reconcileGitHubCommand()` answers usage and configuration problems with exit 2 and asks GitHub for nothing", async () => {
  const problems = [
    await reconcile(["--since", "yesterday"]),
    await reconcile(["--endpoint", "other"]),
    await reconcile(["--bogus"]),
    await reconcile([], { ...ENV, GITHUB_HOOK_REPOS: "users/acme/hooks/7" }),
    await reconcile([], { ...ENV, GITHUB_TOKEN_REPOS: "" }),
    await reconcile([], { ...ENV, WEBHOOK_ENDPOINTS: "github/repos,github/orgs" }),
  ];
  expect(problems.map((p) => p.code)).toEqual([2, 2, 2, 2, 2, 2]);
  expect(problems[4]!.err.join("\n")).toContain("GITHUB_TOKEN_REPOS is required");
  expect(problems[5]!.err.join("\n")).toContain("name one with --endpoint");
  expect(store.requests).toEqual([]);
});

test("`readGitHubHook()` takes repository, organization and app hooks, refuses anything else, and never echoes the token", () => {
  for (const hook of ["repos/acme/shop/hooks/7", "orgs/acme/hooks/9", "app/hook"])
    expect(readGitHubHook({ GITHUB_HOOK_MY_REPOS: hook, GITHUB_TOKEN_MY_REPOS: TOKEN }, "my-repos")).toMatchObject({
      hook,
      apiBase: "https://api.github.com",
    });
  const bad = readGitHubHook({ GITHUB_HOOK_X: "repos/acme/hooks/7", GITHUB_TOKEN_X: `${TOKEN} extra`, GITHUB_API_BASE: "ftp://x" }, "x");
  expect(Array.isArray(bad) && bad.length).toBe(3);
  expect(JSON.stringify(bad)).not.toContain(TOKEN);
});

test("`bun run reconcile github` as a process: a wrong token is one line on stderr without the token, exit 1", async () => {
  const wrong = "ghp_wrongToken9876543210zyxwvuZYXWVU9876";
  const run = spawnBun(
    ["src/bin/reconcile.ts", "github"],
    { PATH: process.env.PATH, DATABASE_URL: fresh.url, ...ENV, GITHUB_TOKEN_REPOS: wrong },
    tracked,
  );
  const code = await run.child.exited;
  await run.stdoutDone;
  const stderr = (await run.stderr).trim();
  expect({ code, stdout: run.lines, lines: stderr.split("\n").length }).toEqual({ code: 1, stdout: [], lines: 1 });
  expect(stderr).toContain("GitHub refused GITHUB_TOKEN_REPOS");
  expect(stderr).not.toContain(wrong);
}, 30_000);
