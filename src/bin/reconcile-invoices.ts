// Entry file: `bun run reconcile:invoices` (the `invoices` part of `bun run reconcile`): compares
// Stripe's invoices with the local billing rows and, with --repair, applies Stripe's through the handlers.
// Exit codes: 0 nothing drifted, 1 drift found or a failure, 2 usage or configuration error.
import { reconcileInvoicesCommand } from "../reconcile/invoices-command.ts";
import { openCommandDatabase } from "../runtime/refuse-hidden-pooler.ts";

const code = await reconcileInvoicesCommand(process.argv.slice(2), process.env, {
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
});
process.exit(code);
