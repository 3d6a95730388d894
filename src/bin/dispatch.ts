// Entry file: `bun run dispatch [options]`: delivers outbox rows to OUTBOX_SINK_URL, signed with the
// Standard Webhooks scheme. Env, args and signals live here; the loop is src/outbox/dispatcher.ts.
import { flushTelemetry, loadTelemetry } from "../runtime/telemetry.ts";
import { loopLog, openLoopDatabase, parseLoopArgs, readLoopSettings } from "../runtime/loop-settings.ts";
import { runDispatcher } from "../outbox/dispatcher.ts";
import { httpSink } from "../outbox/http-sink.ts";
import { readDatabaseWaitMs } from "../config.ts";
import { poolerFromEnv } from "../runtime/database.ts";
import { hostname } from "node:os";

const USAGE = `Usage: bun run dispatch [options]   (each option also reads OUTBOX_<NAME> from the environment)
  OUTBOX_SINK_URL     (required) where messages are POSTed, http(s)
  OUTBOX_SINK_SECRET  (required) Standard Webhooks signing secret, whsec_<base64>
  --concurrency N     deliveries at once (default 4)
  --lease-ms N        lease per claim, ms (default 60000)
  --timeout-ms N      HTTP timeout per delivery, ms, < lease (default 30000)
  --max-attempts N    attempts before needs-review (default 10)
  --poll-ms N         poll interval when no NOTIFY arrives, ms (default 5000)
  --backoff-base-ms N first retry delay, ms, doubling (default 1000)
  --backoff-cap-ms N  longest retry delay, ms (default 600000)
  --heartbeat-ms N    how often its heartbeat row is written, ms; 3 missed beats read as dead (default 10000)
  --ordered           one row at a time per aggregate, in id order (OUTBOX_ORDERED=true)
  --no-listen         do not LISTEN (behind a transaction pooler); poll only
  DATABASE_WAIT_MS    how long to wait at start for the database to answer, ms (default 60000; 0 tries once)`;

function usageError(problems: string[]): never {
  console.error(`Cannot start the dispatcher:\n${problems.map((p) => `  - ${p}`).join("\n")}\n\n${USAGE}`);
  process.exit(2);
}

const flags = parseLoopArgs(USAGE, { ordered: { type: "boolean", default: false } }, (message) => usageError([message]));

// Every problem is listed at once, each naming its flag or variable; secrets are never echoed.
const problems: string[] = [];
const settings = readLoopSettings(flags, process.env, "OUTBOX", problems);
const orderedEnv = process.env.OUTBOX_ORDERED;
if (orderedEnv !== undefined && !["true", "false", ""].includes(orderedEnv))
  problems.push(`OUTBOX_ORDERED must be true or false, got "${orderedEnv}"`);
const ordered = flags.ordered === true || orderedEnv === "true";
const waitMs = readDatabaseWaitMs(process.env, problems);
const sinkUrl = process.env.OUTBOX_SINK_URL;
const sinkSecret = process.env.OUTBOX_SINK_SECRET;
if (!sinkUrl) problems.push("OUTBOX_SINK_URL is not set: the URL that receives outbox messages");
if (!sinkSecret) problems.push("OUTBOX_SINK_SECRET is not set: the receiver's Standard Webhooks secret, whsec_<base64>");
let send;
if (sinkUrl && sinkSecret) {
  try {
    send = httpSink({ url: sinkUrl, secret: sinkSecret });
  } catch (err) {
    problems.push(`OUTBOX_SINK_URL / OUTBOX_SINK_SECRET: ${err instanceof Error ? err.message : String(err)}`);
  }
}
if (problems.length > 0 || !send) usageError(problems);

const pooler = poolerFromEnv(process.env);
const log = loopLog((message) => usageError([message]));
const { database, db, controller } = await openLoopDatabase("dispatcher", "webhook-inbox dispatch", settings, waitMs, pooler, log);

log({
  dispatcher: "started",
  database: database.embedded ? "embedded" : "DATABASE_URL",
  sink: new URL(sinkUrl as string).origin,
  ordered,
  ...settings,
});
const telemetry = await loadTelemetry(process.env);
await runDispatcher({
  db,
  send,
  signal: controller.signal,
  concurrency: settings.concurrency,
  leaseMs: settings["lease-ms"],
  timeoutMs: settings["timeout-ms"],
  maxAttempts: settings["max-attempts"],
  pollMs: settings["poll-ms"],
  backoff: { baseMs: settings["backoff-base-ms"], capMs: settings["backoff-cap-ms"] },
  ordered,
  listen: !flags["no-listen"] && pooler !== "transaction", // LISTEN does not survive a transaction pooler
  telemetry,
  log,
  heartbeat: {
    host: hostname(),
    pid: process.pid,
    everyMs: settings["heartbeat-ms"],
    detail: `sink ${new URL(sinkUrl as string).origin}, ${settings.concurrency} slot(s)`,
  },
});
await db.end({ timeout: 5 });
log({ dispatcher: "stopped" });
await flushTelemetry(telemetry);
process.exit(0);
