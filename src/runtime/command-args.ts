// Edge helper (process.argv, process.exit): the arguments of a command that takes none but `--help`.

/**
 * For a command that takes no arguments (its settings come from the environment): with `--help` or
 * `-h` among `args` prints `usage` and exits 0 before anything starts (a `serve --help` must not start
 * a receiver or migrate a database); with any other argument prints the problem and `usage` on stderr
 * and exits 2. Returns when `args` is empty.
 */
export function takeNoArguments(command: string, usage: string, args: readonly string[]): void {
  if (args.some((a) => a === "--help" || a === "-h")) {
    console.log(usage);
    process.exit(0);
  }
  if (args.length > 0) {
    console.error(`${command} takes no arguments, got ${args.map((a) => `"${a}"`).join(" ")}\n\n${usage}`);
    process.exit(2);
  }
}

/** `serve --help`, under Bun (src/bin/serve.ts) and Node.js (src/adapter/node/serve.ts). */
export const SERVE_USAGE = `Usage: bun run serve   (webhook-inbox serve in an app)
  the receiver: verifies, records and applies webhooks (docs/how-it-works.md); applies pending migrations
  first (MIGRATE_ON_START). Takes no arguments: every setting comes from the environment (PORT, HOST,
  DATABASE_URL, STRIPE_WEBHOOK_SECRET, INBOX_MODE, …: docs/configuration.md).`;
