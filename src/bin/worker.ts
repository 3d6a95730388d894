// Entry file: `bun run worker [options]`: processes async and hybrid rows. Env, args and signals live here.
import { parseArgs } from "node:util";
import { readPooler } from "../config.ts";
import { connect } from "../db.ts";
import { handlersFor } from "../endpoints.ts";
import { migrate } from "../migrate.ts";
import { openDatabase } from "../runtime/database.ts";
import { loadMigrations } from "../runtime/migrations-fs.ts";
import { runWorker } from "../worker.ts";

const USAGE = `Usage: bun run worker [options]   (each option also reads WORKER_<NAME> from the environment)
  --concurrency N     rows processed at once (default 4)
  --lease-ms N        lease per claim, ms (default 60000)
  --timeout-ms N      statement timeout per row, ms, < lease (default 30000)
  --max-attempts N    attempts before needs-review (default 10)
  --poll-ms N         poll interval when no NOTIFY arrives, ms (default 5000)
  --backoff-base-ms N first retry delay, ms, doubling (default 1000)
  --backoff-cap-ms N  longest retry delay, ms (default 600000)
  --no-listen         do not LISTEN; poll only (implied by DATABASE_POOLER=transaction)`;

const names = ["concurrency", "lease-ms", "timeout-ms", "max-attempts", "poll-ms", "backoff-base-ms", "backoff-cap-ms"] as const;
const defaults: Record<(typeof names)[number], number> = {
  concurrency: 4, "lease-ms": 60_000, "timeout-ms": 30_000, "max-attempts": 10, "poll-ms": 5_000, "backoff-base-ms": 1_000, "backoff-cap-ms": 600_000,
};

function usageError(message: string): never {
  console.error(`${message}\n\n${USAGE}`);
  process.exit(2);
}

let parsed;
try {
  parsed = parseArgs({
    options: {
      ...Object.fromEntries(names.map((n) => [n, { type: "string" as const }])),
      "no-listen": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
} catch (err) {
  usageError(err instanceof Error ? err.message : String(err));
}
if (parsed.values.help) {
  console.log(USAGE);
  process.exit(0);
}
const settings = {} as Record<(typeof names)[number], number>;
for (const name of names) {
  const envName = `WORKER_${name.toUpperCase().replaceAll("-", "_")}`;
  const raw = (parsed.values as Record<string, unknown>)[name] ?? process.env[envName];
  const value = raw === undefined ? defaults[name] : Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) usageError(`--${name} (${envName}) must be a whole number ≥ 1, got "${String(raw)}"`);
  settings[name] = value;
}
if (settings["timeout-ms"] >= settings["lease-ms"]) usageError(`--timeout-ms (${settings["timeout-ms"]}) must be shorter than --lease-ms (${settings["lease-ms"]})`);
const poolerProblems: string[] = [];
const pooler = readPooler(process.env, poolerProblems);
if (poolerProblems[0]) usageError(poolerProblems[0]);
// A transaction pooler hands each transaction any server connection: a LISTEN would be registered on a
// connection we do not keep, so notifications never arrive. Poll only there.
const listen = !parsed.values["no-listen"] && pooler !== "transaction";

const database = await openDatabase(process.env);
const db = connect(database.url, { max: settings.concurrency + 1, applicationName: "webhook-inbox worker", pooler });
await migrate(db, loadMigrations());

const controller = new AbortController();
let signals = 0;
function onSignal(signal: string): void {
  if (++signals > 1) process.exit(1); // second signal: exit at once
  console.log(JSON.stringify({ worker: "stopping", signal }));
  controller.abort();
}
process.on("SIGTERM", () => onSignal("SIGTERM"));
process.on("SIGINT", () => onSignal("SIGINT"));

console.log(JSON.stringify({ worker: "started", database: database.embedded ? "embedded" : "DATABASE_URL", pooler, listen, ...settings }));
await runWorker({
  db,
  handlersFor,
  signal: controller.signal,
  concurrency: settings.concurrency,
  leaseMs: settings["lease-ms"],
  timeoutMs: settings["timeout-ms"],
  maxAttempts: settings["max-attempts"],
  pollMs: settings["poll-ms"],
  backoff: { baseMs: settings["backoff-base-ms"], capMs: settings["backoff-cap-ms"] },
  listen,
});
await db.end({ timeout: 5 });
await database.close();
console.log(JSON.stringify({ worker: "stopped" }));
process.exit(0);
