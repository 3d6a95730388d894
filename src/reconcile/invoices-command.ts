import { invoiceKind } from "./invoice-drift.ts";
import { runReconcile, type ReconcileIo } from "./reconcile-command.ts";

/**
 * `bun run reconcile invoices [--since 30d|ISO] [--account acct_… | --all-accounts] [--repair] [--dry-run] [--json]`: Stripe's invoices
 * against `invoices` and their payment ledger entries ({@link invoiceKind}; drift classes in
 * invoice-drift.ts), repaired through the billing handlers. Returns the exit code (0 no drift, 1 drift
 * or failure, 2 usage or configuration); `io.openDatabase` opens the database as other commands do.
 */
export function reconcileInvoicesCommand(args: string[], env: Record<string, string | undefined>, io: ReconcileIo): Promise<number> {
  return runReconcile(invoiceKind, args, env, io);
}
