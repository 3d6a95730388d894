// Edge helper: how the messages of a command name the other commands, as the user can run them. In this
// repository they are `bun run` scripts (`bun run db:stop`); in an app that installed the package they are
// subcommands of `webhook-inbox` (`webhook-inbox db stop`), which the app's package.json has no scripts for.

let viaCli = false;

/** Called once by the `webhook-inbox` command (src/bin/webhook-inbox.ts) before the command it runs loads. */
export function useCliCommandNames(): void {
  viaCli = true;
}

/**
 * The command line that runs `script` (a package.json script name of this repository, e.g. `db:stop`,
 * `deliver`, `reconcile events`) for the user reading the message: `bun run db:stop` here,
 * `webhook-inbox db stop` under the `webhook-inbox` command.
 */
export function commandLine(script: string): string {
  return viaCli ? `webhook-inbox ${script.replace(":", " ")}` : `bun run ${script}`;
}
