// The package as a team's own app imports it: by its name, through package.json `exports`
// (self-reference), not by paths into src/.
import { afterAll, expect, test } from "bun:test";
import {
  assertPatchedPostgres,
  createApp,
  handlersFor,
  PermanentError,
  handlerTable,
  runWorker,
  stripeEndpoints,
  stripeHandlers,
  stripeProvider,
  providerNamed,
  type HandlerTable,
} from "webhook-inbox";
import * as handlers from "webhook-inbox/handlers";
import { loadMigrations } from "webhook-inbox/migrations";
import { fixture, freshDatabase, SECRET, signedRequest } from "./support/helpers.ts";

const fresh = await freshDatabase();
afterAll(() => fresh.drop());

test("`createApp()` imported as webhook-inbox serves one signed Stripe event and records it processed", async () => {
  const app = createApp({ db: fresh.db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]), log: () => {} });
  const body = fixture("01_invoice.created_evt_1SkB1aLgUG5tbmjc0created.json");
  const res = await app.fetch(await signedRequest("http://app.test/webhooks/stripe", body));
  expect(await res.json()).toEqual({ outcome: "processed", event_id: "evt_1SkB1aLgUG5tbmjc0created" });
  expect(await fresh.db`select provider, event_id, outcome from webhook_inbox`).toEqual([
    { provider: "stripe", event_id: "evt_1SkB1aLgUG5tbmjc0created", outcome: "processed" },
  ] as never);
});

test("`stripeEndpoints()` and `handlersFor()` serve one Stripe handler table, money going out included", () => {
  const [endpoint] = stripeEndpoints([{ name: "billing", secrets: [SECRET] }]);
  expect(endpoint?.handlers).toBe(handlersFor("stripe") as HandlerTable);
  expect(endpoint?.handlers).toBe(stripeHandlers);
  expect(typeof stripeHandlers["refund.created"]).toBe("function");
  expect(typeof stripeHandlers["invoice.paid"]).toBe("function");
});

test("`webhook-inbox` exports the handler helpers, the worker, the providers and the migrations loader", () => {
  const table: HandlerTable = handlerTable({ "x.y": async (tx) => void (await tx`select 1`) });
  expect(typeof table["x.y"]).toBe("function");
  expect(handlers.handlerTable).toBe(handlerTable);
  expect(handlers.PermanentError).toBe(PermanentError);
  expect(typeof runWorker).toBe("function");
  expect(providerNamed("stripe")).toBe(stripeProvider);
  expect(loadMigrations().length).toBeGreaterThan(9);
});

test("`PACKAGE_VERSION` (webhook-inbox version) is package.json's version, semver, with its CHANGELOG.md entry", async () => {
  const { PACKAGE_VERSION } = await import("webhook-inbox");
  const pkg = await Bun.file(`${import.meta.dir}/../package.json`).json();
  expect(PACKAGE_VERSION).toBe(pkg.version);
  expect(PACKAGE_VERSION).toMatch(/^\d+\.\d+\.\d+$/);
  expect(await Bun.file(`${import.meta.dir}/../CHANGELOG.md`).text()).toContain(`## ${PACKAGE_VERSION} — `);
});

test("`assertPatchedPostgres()` passes for the postgres.js this package loads (patched by patchedDependencies)", () => {
  expect(() => assertPatchedPostgres()).not.toThrow();
});

test("`assertPatchedPostgres()` throws for an unpatched postgres.js, naming the patch and the patchedDependencies entry to add", () => {
  function Postgres(a: unknown, b: unknown) {
    return [a, b];
  }
  expect(() => assertPatchedPostgres(Postgres)).toThrow('"patchedDependencies": { "postgres@3.4.9": "patches/postgres@3.4.9.patch" }');
  expect(() => assertPatchedPostgres({ default: Postgres })).toThrow("unpatched");
});

test("`bun pm pack` builds and packs dist (JavaScript, declarations, the vendored postgres.js), sql, docs, README.md and CHANGELOG.md, and never src, .data, test or bench-results", () => {
  const packed = Bun.spawnSync(["bun", "pm", "pack", "--dry-run"], { cwd: `${import.meta.dir}/..`, stdout: "pipe", stderr: "pipe" });
  const files = `${packed.stdout.toString()}${packed.stderr.toString()}`
    .split("\n")
    .map((line) => /^packed \S+ (.+)$/.exec(line.trim())?.[1])
    .filter((file): file is string => file !== undefined);
  for (const file of [
    "dist/index.js",
    "dist/bin/webhook-inbox.js",
    "dist/testing/contract-suite.js",
    "dist/types/index.d.ts",
    "dist/vendor/postgres/README.md",
    "dist/vendor/postgres/index.d.ts",
    "dist/vendor/postgres/postgres@3.4.9.patch",
    "sql/0001_inbox.sql",
    "README.md",
    "CHANGELOG.md",
    "docs/troubleshooting.md",
  ])
    expect(files).toContain(file);
  expect(files.filter((file) => /^(src|\.data|test|bench-results|node_modules|patches)\//.test(file) || file === "bun.lock")).toEqual([]);
  // The bundle carries the patched postgres.js, so an installed app needs no patch step.
  const chunks = files.filter((f) => f.startsWith("dist/chunks/")).map((f) => Bun.file(`${import.meta.dir}/../${f}`).text());
  return Promise.all(chunks).then((texts) => expect(texts.some((t) => t.includes("COMMIT_ROLLED_BACK"))).toBe(true));
});
