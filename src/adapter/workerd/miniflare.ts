// Entry file: `bun run serve:workerd`. Bundles worker.ts for workerd (the `workerd` export condition picks
// postgres.js's cloudflare:sockets build and Stripe's worker build) and serves it with the workerd binary
// from npm through Miniflare on HOST:PORT. The receiver's settings become the Worker's env binding.
import { Miniflare } from "miniflare";
import { fileURLToPath } from "node:url";
import { ConfigError } from "../../config.ts";
import { loadServerConfig, type ServerConfig } from "../../runtime/receiver.ts";
import { refuseHiddenPooler } from "../../runtime/refuse-hidden-pooler.ts";
import { onStopSignals } from "../../runtime/signals.ts";

const WORKER = fileURLToPath(new URL("./worker.ts", import.meta.url));
/** Variables the receiver reads (src/config.ts); PORT and HOST are Miniflare's own. */
const SETTING =
  /^(DATABASE_URL|DATABASE_POOLER|STRIPE_\w+|INBOX_MODE\w*|HYBRID_BUDGET_MS|MAX_BODY_BYTES|DB_POOL_MAX|QUEUE_TIMEOUT_MS|STATEMENT_TIMEOUT_MS|METRICS_TOKEN)$/;

// The Worker reads its settings per request; check them here first, so bad settings stop the start
// (as they do for `bun run serve`) instead of answering every webhook 500.
let config: ServerConfig;
try {
  config = loadServerConfig(process.env, "workerd");
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  process.exit(1);
}
// Checked here once: the Worker opens a client per request, too often for this check.
await refuseHiddenPooler({ url: config.databaseUrl }, config.databasePooler);

const build = await Bun.build({
  entrypoints: [WORKER],
  target: "browser",
  format: "esm",
  conditions: ["workerd", "worker"],
  external: ["cloudflare:*", "node:*"],
});
const bundle = build.outputs[0];
if (!build.success || !bundle) {
  for (const message of build.logs) console.error(message);
  process.exit(1);
}
const bindings = Object.fromEntries(
  Object.entries(process.env).filter(([name, value]) => SETTING.test(name) && value !== undefined),
) as Record<string, string>;
const ours = new Set([...process.listeners("SIGTERM"), ...process.listeners("SIGINT")]);
const mf = new Miniflare({
  modules: true,
  script: await bundle.text(),
  compatibilityDate: "2025-09-01",
  compatibilityFlags: ["nodejs_compat"],
  bindings,
  host: process.env.HOST || "127.0.0.1",
  port: Number(process.env.PORT || 3000),
});
// Miniflare's exit hook answers SIGTERM/SIGINT by exiting 143/130; shutdown() below disposes instead.
// Its "exit" hook stays, so workerd is still stopped if this process exits any other way.
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  for (const listener of process.listeners(signal)) if (!ours.has(listener)) process.removeListener(signal, listener);
}
const url = await mf.ready;
console.log(`webhook-inbox (workerd through Miniflare) listening on ${url.origin}`);

async function shutdown(signal: string): Promise<void> {
  console.log(`${signal}: stopping workerd`);
  await mf.dispose();
  process.exit(0);
}
// A repeated SIGTERM is ignored; a second Ctrl-C (not the duplicate of `bun run`) exits at once.
onStopSignals(
  (signal) => void shutdown(signal),
  () => process.exit(1),
);
