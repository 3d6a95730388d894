// Entry file: `bun run reconcile:invoices`, `reconcile:refunds`, `reconcile:disputes` (the object half of
// `bun run reconcile`): compares Stripe's objects with the local rows and, with --repair, applies
// Stripe's through the handlers. Usage: bun src/bin/reconcile-objects.ts <invoices|refunds|disputes> [options]
// Exit codes: 0 nothing drifted, 1 drift found or a failure, 2 usage or configuration error.
import { reconcileInvoicesCommand } from "../reconcile/invoices-command.ts";
import { reconcileDisputesCommand, reconcileRefundsCommand } from "../reconcile/money-commands.ts";
import type { ReconcileIo } from "../reconcile/reconcile-command.ts";
import { openCommandDatabase } from "../runtime/refuse-hidden-pooler.ts";

const COMMANDS = { invoices: reconcileInvoicesCommand, refunds: reconcileRefundsCommand, disputes: reconcileDisputesCommand };

const io: ReconcileIo = {
  async openDatabase(env) {
    const { database, db } = await openCommandDatabase(env, "webhook-inbox reconcile", 2);
    return {
      db,
      async close() {
        await db.end({ timeout: 5 });
        await database.close();
      },
    };
  },
};

const [what, ...args] = process.argv.slice(2);
const command = what !== undefined && Object.hasOwn(COMMANDS, what) ? COMMANDS[what as keyof typeof COMMANDS] : undefined;
if (!command) {
  console.error(`Usage: bun src/bin/reconcile-objects.ts <invoices|refunds|disputes> [--since 30d|ISO] [--repair] [--dry-run] [--json]`);
  process.exit(2);
}
process.exit(await command(args, process.env, io));
