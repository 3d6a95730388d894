// Entry file: `bun run reconcile <events|invoices> …`: recover what webhooks never delivered.
// Env, the database, signals and the terminal live here; the commands are in src/reconcile/.
import { connect } from "../db/db.ts";
import { reconcileEventsCommand } from "../reconcile/events-command.ts";
import { openDatabase, poolerFromEnv } from "../runtime/database.ts";
import { refuseHiddenPooler } from "../runtime/refuse-hidden-pooler.ts";
import { onStopSignals } from "../runtime/signals.ts";

const USAGE = `Usage: bun run reconcile <command> [options]   (--help after a command for its options)
  events     backfill events from Stripe's Events API into the inbox (same keys as webhook deliveries)
  invoices   compare invoices with Stripe and repair drift`;

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
        openDb: async () => {
          const database = await openDatabase(process.env).catch((err: unknown) => {
            console.error(`Cannot open the database: ${err instanceof Error ? err.message : String(err)}`);
            process.exit(1);
          });
          const pooler = poolerFromEnv(process.env);
          await refuseHiddenPooler(database, pooler);
          const db = connect(database.url, { max: 2, applicationName: "webhook-inbox reconcile", pooler });
          return {
            db,
            close: async () => {
              await db.end({ timeout: 5 });
              await database.close();
            },
          };
        },
        out: (line) => console.log(line),
        err: (line) => console.error(line),
        progress: process.stderr.isTTY ? (line) => console.error(line) : undefined,
        signal,
      });
    }
    case "invoices":
      console.error("reconcile invoices is not available in this build");
      return 2;
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

process.exit(await run());
