#!/usr/bin/env bun
// Entry file: the `webhook-inbox` command (package.json `bin`): loads the app's configuration
// (webhook-inbox.config.ts in the folder it runs from, or --config FILE), makes it this process's
// (handler tables, migrations folder, settings), then runs one of the package's commands with the
// rest of the arguments. `init` scaffolds an app and needs no configuration.
// Exit codes: those of the command run; 2 usage error; 1 a configuration that cannot be used.
import { applyAppConfig, loadAppConfig } from "../runtime/app-config-file.ts";
import { PACKAGE_VERSION } from "../version.ts";
import { useCliCommandNames } from "../runtime/command-name.ts";

const USAGE = `Usage: webhook-inbox <command> [arguments] [--config FILE]
  init [DIR]         scaffold an app in DIR (default: this folder): configuration, a customer.created
                     handler, its migration, a fixture and a contract test
  serve              the receiver (Bun.serve; under Node.js, node:http with DATABASE_URL required)
  worker             the inbox worker (async and hybrid mode rows)      webhook-inbox worker --help
  dispatch           the outbox dispatcher                              webhook-inbox dispatch --help
  migrate            apply the package's migrations, then the app's
  inbox …            the operator's inbox commands                      webhook-inbox inbox --help
  reconcile …        Stripe Events API backfill and reconciliation      webhook-inbox reconcile --help
  billing            print the billing tables
  db status|start|stop|reset   the embedded development PostgreSQL (.data/postgres)
  deliver FILE|DIR…  send fixture events signed like Stripe does        webhook-inbox deliver --help
  version            print the package version
--config FILE: the app's configuration module (default: the first of webhook-inbox.config.ts, .mjs, .js
here; none: the shipped handlers and settings). Settings come from the environment first, then from the
configuration's \`settings\`. docs/app.md`;

type Command = () => Promise<unknown>;
const onBun = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined";
/** Each command is the module of its `bun run` script, loaded once the configuration is in place. */
const commands: Record<string, Command> = {
  serve: () => (onBun ? import("./serve.ts") : import("../adapter/node/serve.ts")),
  worker: () => import("./worker.ts"),
  dispatch: () => import("./dispatch.ts"),
  migrate: () => import("./migrate.ts"),
  inbox: () => import("./inbox.ts"),
  reconcile: () => import("./reconcile.ts"),
  billing: () => import("./billing.ts"),
  db: () => import("./db.ts"),
  deliver: () => import("../dev/bin/deliver.ts"),
};

const [runtime = "bun", script = "webhook-inbox", ...args] = process.argv;
let configPath: string | undefined;
const rest: string[] = [];
for (let i = 0; i < args.length; i++) {
  const arg = args[i] as string;
  if (arg === "--") {
    rest.push(...args.slice(i));
    break;
  }
  if (arg === "--config" || arg.startsWith("--config=")) {
    configPath = arg === "--config" ? args[++i] : arg.slice("--config=".length);
    if (!configPath) usage("--config needs a file");
    continue;
  }
  rest.push(arg);
}
const [command, ...commandArgs] = rest;

if (command === undefined || command === "--help" || command === "-h" || command === "help") {
  console.log(USAGE);
  process.exit(command === undefined ? 2 : 0);
}
if (command === "version" || command === "--version") {
  console.log(PACKAGE_VERSION);
  process.exit(0);
}
if (command === "init") {
  const { runInit } = await import("./init.ts");
  process.exit(await runInit(commandArgs));
}
const load = commands[command];
if (!load) usage(`unknown command "${command}"`);

try {
  const loaded = await loadAppConfig(configPath);
  applyAppConfig(loaded, process.env);
  // A long-running command says which configuration and handlers it runs (a table under the wrong event
  // type is then visible at start, not only as events recorded ignored).
  if (loaded.file !== undefined && ["serve", "worker", "dispatch"].includes(command)) {
    const tables = Object.entries(loaded.config.handlers ?? {}).map(
      ([provider, table]) => `${provider}: ${Object.keys(table ?? {}).join(", ")}`,
    );
    console.log(
      `webhook-inbox ${PACKAGE_VERSION}: configuration ${loaded.file}; the app's handlers ${tables.join("; ") || "none"}` +
        (loaded.config.replaceHandlers ? " (replacing the shipped ones)" : " (beside the shipped ones)"),
    );
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
}
// The command reads its own arguments from process.argv.slice(2), as under `bun run`, and names the
// other commands as this one runs them (`webhook-inbox db stop`, not the repository's `bun run db:stop`).
process.argv = [runtime, script, ...commandArgs];
useCliCommandNames();
await load();

function usage(problem: string): never {
  console.error(`webhook-inbox: ${problem}\n\n${USAGE}`);
  process.exit(2);
}
