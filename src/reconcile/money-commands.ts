import { disputeKind } from "./dispute-drift.ts";
import { refundKind } from "./refund-drift.ts";
import { runReconcile, type ReconcileIo } from "./reconcile-command.ts";

/**
 * `bun run reconcile refunds [--since 30d|ISO] [--account acct_… | --all-accounts] [--repair] [--dry-run] [--json]`: Stripe's refunds
 * against `refunds` and the `refund` ledger entries ({@link refundKind}; classes in refund-drift.ts),
 * repaired through `applyRefund`. Returns the exit code (0 no drift, 1 drift or failure, 2 usage).
 */
export function reconcileRefundsCommand(args: string[], env: Record<string, string | undefined>, io: ReconcileIo): Promise<number> {
  return runReconcile(refundKind, args, env, io);
}

/**
 * `bun run reconcile disputes [--since 30d|ISO] [--account acct_… | --all-accounts] [--repair] [--dry-run] [--json]`: Stripe's disputes
 * against `disputes` and the movements their balance transactions stand for ({@link disputeKind};
 * classes in dispute-drift.ts), repaired through `applyDispute`. Returns the exit code as above.
 */
export function reconcileDisputesCommand(args: string[], env: Record<string, string | undefined>, io: ReconcileIo): Promise<number> {
  return runReconcile(disputeKind, args, env, io);
}
