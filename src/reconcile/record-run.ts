import type { Db } from "../db/db.ts";

/** One account's part of a reconciliation run, as {@link recordReconcileRun} keeps it. */
export interface ReconcileRun {
  /** `invoices`, `refunds` or `disputes`. */
  kind: string;
  /** `acct_…`, or `""` for the platform. */
  account: string;
  /** Objects created since this moment were compared. */
  since: Date;
  checked: number;
  /** The drifted objects, each with what a --repair did (`repair.outcome` "repaired" counts as repaired). */
  drift: readonly { drift: string; repair?: { outcome: string } }[];
}

/**
 * Keeps the latest run of `run.kind` for `run.account` in `reconcile_runs` (sql/0029_health.sql), replacing
 * the one before: what it checked, how many objects drifted (a dry run's too: drift was found), how many a
 * --repair applied, and the count per drift class. Read by /metrics (`webhook_reconcile_drifted`, alert
 * WebhookReconcileDrift, docs/observability.md) and `inbox status`.
 */
export async function recordReconcileRun(db: Db, run: ReconcileRun): Promise<void> {
  const byClass: Record<string, number> = {};
  for (const d of run.drift) byClass[d.drift] = (byClass[d.drift] ?? 0) + 1;
  const repaired = run.drift.filter((d) => d.repair?.outcome === "repaired").length;
  await db`
    insert into reconcile_runs (kind, account, since, checked, drifted, repaired, by_class)
    values (${run.kind}, ${run.account}, ${run.since}, ${run.checked}, ${run.drift.length}, ${repaired}, ${db.json(byClass)})
    on conflict (kind, account) do update
       set finished_at = now(),
           since = excluded.since,
           checked = excluded.checked,
           drifted = excluded.drifted,
           repaired = excluded.repaired,
           by_class = excluded.by_class
  `;
}
