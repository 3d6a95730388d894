// Entry file: `bun run reconcile <events|invoices|refunds|disputes|github> …`: recover what webhooks never
// delivered. Env, the database, signals and the terminal live here; the commands are in src/reconcile/.
// Exit codes: 0 nothing to recover or drifted, 1 something was (or a failure), 2 usage or configuration.
import { flushTelemetry, loadTelemetry } from "../runtime/telemetry.ts";
import { reconcileEventsCommand } from "../reconcile/events-command.ts";
import { reconcileGitHubCommand } from "../reconcile/github-command.ts";
import { reconcileInvoicesCommand } from "../reconcile/invoices-command.ts";
import { reconcileDisputesCommand, reconcileRefundsCommand } from "../reconcile/money-commands.ts";
import { openCommandDatabase } from "../runtime/refuse-hidden-pooler.ts";
import { onStopSignals } from "../runtime/signals.ts";

/** Opens the database as every one-shot command does (exits 1 with one line when it cannot). */
async function openDb(env: Record<string, string | undefined>, max: number) {
  const { db } = await openCommandDatabase(env, "webhook-inbox reconcile", max);
  return {
    db,
    close: async () => {
      await db.end({ timeout: 5 });
    },
  };
}

const USAGE = `Usage: bun run reconcile <command> [options]   (--help after a command for its options)
  events     backfill events from Stripe's Events API into the inbox (same keys as webhook deliveries)
  invoices   compare invoices with Stripe and, with --repair, repair drift through the handlers
  refunds    the same for refunds
  disputes   the same for disputes
  github     ask GitHub to redeliver a hook's failed deliveries the inbox does not hold (GitHub never retries)
the Stripe commands read the platform's own account; --account acct_… reads one connected account, --all-accounts the platform
and every connected account (each with its own checkpoint for events)`;

const [command, ...args] = process.argv.slice(2);

async function run(): Promise<number> {
  switch (command) {
    case "events": {
      // A stop ends the run after its current page (the checkpoint is then exact); a second Ctrl-C exits at once.
      const stop = new AbortController();
      onStopSignals(
        () => stop.abort(),
        () => process.exit(1),
      );
      const signal = stop.signal;
      return reconcileEventsCommand(args, process.env, {
        openDb: () => openDb(process.env, 2),
        out: (line) => console.log(line),
        err: (line) => console.error(line),
        progress: process.stderr.isTTY ? (line) => console.error(line) : undefined,
        signal,
        telemetry,
      });
    }
    case "invoices":
    case "refunds":
    case "disputes": {
      const run = { invoices: reconcileInvoicesCommand, refunds: reconcileRefundsCommand, disputes: reconcileDisputesCommand }[command];
      return run(args, process.env, { openDatabase: (env) => openDb(env, 2), telemetry });
    }
    case "github":
      return reconcileGitHubCommand(args, process.env, {
        openDb: () => openDb(process.env, 1),
        out: (line) => console.log(line),
        err: (line) => console.error(line),
      });
    case undefined:
    case "--help":
    case "-h":
      console.log(USAGE);
      return command === undefined ? 2 : 0;
    default:
      console.error(`Unknown command "${command}"\n\n${USAGE}`);
      return 2;
  }
}

// OpenTelemetry when `@opentelemetry/api` is installed: backfill runs and repairs are spans.
const telemetry = await loadTelemetry(process.env);
const code = await run();
await flushTelemetry(telemetry);
process.exit(code);
