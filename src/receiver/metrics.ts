import type { BackfillAges, Backlog, OutboxBacklog, ReconcileDrift } from "../inbox/backlog.ts";
import type { ArrivalGap } from "../inbox/hours.ts";
import type { LoopProcess } from "../loop/heartbeat.ts";
import type { Pause } from "../inbox/pauses.ts";

/** Label pair of the backlog of endpoints that are not configured (see `render`). */
const UNCONFIGURED = { provider: "_unconfigured", endpoint: "_unconfigured" };

/** Upper bounds of the processing-duration histogram, seconds. */
const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** One delivery as metrics see it; `endpoint` must be a configured name (bounded cardinality). */
export interface DeliveryObservation {
  provider: string;
  endpoint: string;
  /** processed | duplicate | ignored | queued | rejected */
  outcome: string;
  /** The error code of a rejected delivery. */
  reason?: string;
  durationSec: number;
}

/** The backlogs read from the database at scrape time (see `readBacklog`, `readOutboxBacklog`). */
export interface BacklogSnapshot {
  inbox: Backlog[];
  outbox: OutboxBacklog;
  /** Event backfill checkpoints and unfinished requests (absent: not read). */
  backfill?: BackfillAges;
  /** Workers' and dispatchers' heartbeat rows (absent: not read). */
  processes?: LoopProcess[];
  /** Per endpoint, the newest arrival and the longest silence of the last 7 days (absent: not read). */
  arrivals?: ArrivalGap[];
  /** The latest object reconciliation per kind (absent: not read). */
  reconcile?: ReconcileDrift[];
  /** Pauses in force (`inbox pause`; absent: not read). */
  pauses?: Pause[];
}

/** One counter of {@link Metrics.deliveryCounts}. */
export interface DeliveryCount {
  provider: string;
  endpoint: string;
  /** processed | duplicate | ignored | queued | needs_review | rejected */
  outcome: string;
  count: number;
}

/** In-process counters of one receiver, rendered in the Prometheus text format. */
export interface Metrics {
  observe(o: DeliveryObservation): void;
  /** Deliveries answered since this registry was made, per provider, endpoint and outcome (rejections of every reason summed). */
  deliveryCounts(): DeliveryCount[];
  /** Prometheus text exposition format 0.0.4; `backlog` null when the database could not be read. */
  render(backlog: BacklogSnapshot | null, endpoints: readonly { provider: string; endpoint: string }[]): string;
}

interface Histogram {
  counts: number[];
  sum: number;
  count: number;
}

/**
 * Creates the receiver's metrics (Prometheus docs, "Exposition formats", text format 0.0.4):
 * `webhook_deliveries_total{provider,endpoint,outcome[,reason]}`,
 * `webhook_processing_duration_seconds` (histogram per provider and endpoint, all outcomes), and backlog
 * gauges read from the database at scrape time: `webhook_inbox_unprocessed`,
 * `webhook_inbox_oldest_unprocessed_age_seconds`, `webhook_inbox_needs_review` (per configured
 * provider and endpoint; rows of any other endpoint summed under `_unconfigured`),
 * `webhook_outbox_pending`, `webhook_outbox_oldest_pending_age_seconds`, `webhook_outbox_needs_review`
 * (unlabelled), `webhook_backfill_checkpoint_age_seconds` (per configured endpoint),
 * `webhook_backfill_requests_unfinished` and `webhook_backfill_request_oldest_age_seconds` (unlabelled:
 * requests of any endpoint), `webhook_inbox_paused` (pauses in force: the whole endpoint or one account each),
 * `webhook_inbox_pause_age_seconds` (its oldest pause's age, 0 when none) and `webhook_inbox_held`
 * (unprocessed rows its pauses hold back), per configured endpoint as the backlog gauges (a pause names
 * an endpoint, so both providers of a name shared get it), plus `webhook_inbox_backlog_up` (0 when the database could not be read; the other
 * gauges are then left out rather than reported as 0). Written here rather than with prom-client
 * because the core must stay on Web APIs.
 */
export function createMetrics(): Metrics {
  const deliveries = new Map<string, number>();
  const durations = new Map<string, Histogram>();
  const byOutcome = new Map<string, DeliveryCount>();

  // Label texts per (provider, endpoint, outcome, reason): few, since each comes from configuration or a
  // fixed set of codes; escaping them once keeps six regular-expression replaces off every delivery.
  const labelTexts = new Map<string, { key: string; hKey: string; outcomeId: string }>();

  function observe(o: DeliveryObservation): void {
    const id = `${o.provider}\u0000${o.endpoint}\u0000${o.outcome}\u0000${o.reason ?? ""}`;
    let texts = labelTexts.get(id);
    if (!texts) {
      texts = {
        key: labels({ provider: o.provider, endpoint: o.endpoint, outcome: o.outcome, ...(o.reason ? { reason: o.reason } : {}) }),
        hKey: labels({ provider: o.provider, endpoint: o.endpoint }),
        outcomeId: JSON.stringify([o.provider, o.endpoint, o.outcome]),
      };
      labelTexts.set(id, texts);
    }
    const { key, hKey } = texts;
    deliveries.set(key, (deliveries.get(key) ?? 0) + 1);
    let counted = byOutcome.get(texts.outcomeId);
    if (!counted) byOutcome.set(texts.outcomeId, (counted = { provider: o.provider, endpoint: o.endpoint, outcome: o.outcome, count: 0 }));
    counted.count++;
    const h = durations.get(hKey) ?? { counts: BUCKETS.map(() => 0), sum: 0, count: 0 };
    BUCKETS.forEach((le, i) => {
      if (o.durationSec <= le) h.counts[i] = (h.counts[i] ?? 0) + 1;
    });
    h.sum += o.durationSec;
    h.count += 1;
    durations.set(hKey, h);
  }

  function render(backlog: BacklogSnapshot | null, endpoints: readonly { provider: string; endpoint: string }[]): string {
    const out: string[] = [];
    out.push("# HELP webhook_deliveries_total Webhook deliveries answered, by provider, endpoint and outcome.");
    out.push("# TYPE webhook_deliveries_total counter");
    for (const [key, value] of deliveries) out.push(`webhook_deliveries_total{${key}} ${value}`);
    out.push("# HELP webhook_processing_duration_seconds Time from request to answer, seconds.");
    out.push("# TYPE webhook_processing_duration_seconds histogram");
    for (const [key, h] of durations) {
      BUCKETS.forEach((le, i) => out.push(`webhook_processing_duration_seconds_bucket{${key},le="${le}"} ${h.counts[i] ?? 0}`));
      out.push(`webhook_processing_duration_seconds_bucket{${key},le="+Inf"} ${h.count}`);
      out.push(`webhook_processing_duration_seconds_sum{${key}} ${h.sum}`);
      out.push(`webhook_processing_duration_seconds_count{${key}} ${h.count}`);
    }
    out.push("# HELP webhook_inbox_backlog_up 1 when the backlog gauges below could be read from the database.");
    out.push("# TYPE webhook_inbox_backlog_up gauge");
    out.push(`webhook_inbox_backlog_up ${backlog ? 1 : 0}`);
    if (backlog) {
      const rows = new Map<string, Backlog>();
      for (const e of endpoints) rows.set(labels(e), { ...e, unprocessed: 0, oldestUnprocessedAgeSec: 0, needsReview: 0 });
      for (const b of backlog.inbox) {
        const configured = endpoints.some((e) => e.provider === b.provider && e.endpoint === b.endpoint);
        if (configured) {
          rows.set(labels({ provider: b.provider, endpoint: b.endpoint }), b);
          continue;
        }
        // Rows of endpoints no longer (or never) configured are summed under one fixed label pair, so
        // what the database holds cannot add label values (configured names cannot start with "_").
        const key = labels(UNCONFIGURED);
        const sum = rows.get(key) ?? { ...UNCONFIGURED, unprocessed: 0, oldestUnprocessedAgeSec: 0, needsReview: 0 };
        rows.set(key, {
          ...sum,
          unprocessed: sum.unprocessed + b.unprocessed,
          oldestUnprocessedAgeSec: Math.max(sum.oldestUnprocessedAgeSec, b.oldestUnprocessedAgeSec),
          needsReview: sum.needsReview + b.needsReview,
        });
      }
      const gauge = (name: string, help: string, pick: (b: Backlog) => number) => {
        out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
        for (const [key, b] of rows) out.push(`${name}{${key}} ${pick(b)}`);
      };
      gauge("webhook_inbox_unprocessed", "Rows waiting for a worker (not needs-review).", (b) => b.unprocessed);
      gauge(
        "webhook_inbox_oldest_unprocessed_age_seconds",
        "Age of the oldest row waiting for a worker, seconds.",
        (b) => b.oldestUnprocessedAgeSec,
      );
      gauge("webhook_inbox_needs_review", "Rows parked for an operator (dead letter).", (b) => b.needsReview);
      const single = (name: string, help: string, value: number) =>
        out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name} ${value}`);
      single("webhook_outbox_pending", "Outbox rows not yet published (not needs-review).", backlog.outbox.pending);
      single(
        "webhook_outbox_oldest_pending_age_seconds",
        "Age of the oldest pending outbox row, seconds.",
        backlog.outbox.oldestPendingAgeSec,
      );
      single("webhook_outbox_needs_review", "Outbox rows parked for an operator (dead letter).", backlog.outbox.needsReview);
      // Configured endpoints only, like the other labels; an endpoint never backfilled has no sample.
      const { checkpoints = [], requests = [] } = backlog.backfill ?? {};
      const ages = checkpoints.filter((a) => endpoints.some((e) => e.provider === a.provider && e.endpoint === a.endpoint));
      out.push(
        "# HELP webhook_backfill_checkpoint_age_seconds Seconds since the newest moment event backfill has covered (Stripe keeps events 30 days).",
        "# TYPE webhook_backfill_checkpoint_age_seconds gauge",
      );
      for (const a of ages)
        out.push(`webhook_backfill_checkpoint_age_seconds{${labels({ provider: a.provider, endpoint: a.endpoint })}} ${a.ageSec}`);
      const unfinished = requests.reduce((n, r) => n + r.requests, 0);
      single("webhook_backfill_requests_unfinished", "Event backfill requests no run has finished (docs/failover.md).", unfinished);
      const oldest = Math.max(0, ...requests.map((r) => r.oldestAgeSec));
      single("webhook_backfill_request_oldest_age_seconds", "Age of the oldest unfinished backfill request, seconds; 0: none.", oldest);
      const pauses = backlog.pauses ?? [];
      const paused = new Map<string, { count: number; ageSec: number; held: number }>();
      for (const key of rows.keys()) paused.set(key, { count: 0, ageSec: 0, held: 0 });
      for (const p of pauses) {
        const named = endpoints.filter((e) => e.endpoint === p.endpoint);
        for (const key of named.length > 0 ? named.map((e) => labels(e)) : [labels(UNCONFIGURED)]) {
          const sum = paused.get(key) ?? { count: 0, ageSec: 0, held: 0 };
          paused.set(key, { count: sum.count + 1, ageSec: Math.max(sum.ageSec, p.ageSec), held: sum.held + p.held });
        }
      }
      const pauseGauge = (name: string, help: string, pick: (p: { count: number; ageSec: number; held: number }) => number) => {
        out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
        for (const [key, p] of paused) out.push(`${name}{${key}} ${pick(p)}`);
      };
      pauseGauge(
        "webhook_inbox_paused",
        "Pauses in force (inbox pause): the whole endpoint, or one connected account each.",
        (p) => p.count,
      );
      pauseGauge("webhook_inbox_pause_age_seconds", "Age of the endpoint's oldest pause, seconds; 0: not paused.", (p) => p.ageSec);
      pauseGauge("webhook_inbox_held", "Unprocessed rows the endpoint's pauses hold back.", (p) => p.held);
      renderHealth(out, backlog, endpoints);
    }
    return `${out.join("\n")}\n`;
  }

  return { observe, render, deliveryCounts: () => [...byOutcome.values()].map((c) => ({ ...c })) };
}

/**
 * The health gauges (sql/0029): live workers and dispatchers by kind (both kinds always, 0 when none),
 * per configured endpoint the seconds since its newest arrival and its longest silence over 7 days (only
 * where known), and per reconciled kind the drift its latest run found, repaired, and that run's age.
 */
function renderHealth(out: string[], snapshot: BacklogSnapshot, endpoints: readonly { provider: string; endpoint: string }[]): void {
  const family = (name: string, help: string) => out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
  family("webhook_processes_alive", "Workers and dispatchers whose heartbeat is recent (3 missed beats: dead).");
  for (const kind of ["worker", "dispatcher"])
    out.push(
      `webhook_processes_alive{kind="${kind}"} ${(snapshot.processes ?? []).filter((p) => p.kind === kind && p.state === "alive").length}`,
    );
  const arrivals = (snapshot.arrivals ?? []).filter((a) => endpoints.some((e) => e.provider === a.provider && e.endpoint === a.endpoint));
  family("webhook_inbox_last_received_age_seconds", "Seconds since the endpoint's newest event arrived (within the last 30 days).");
  for (const a of arrivals)
    out.push(`webhook_inbox_last_received_age_seconds{${labels({ provider: a.provider, endpoint: a.endpoint })}} ${a.silenceMs / 1000}`);
  family("webhook_inbox_longest_gap_seconds", "The longest time between two arrivals at the endpoint over the last 7 days, seconds.");
  for (const a of arrivals)
    if (a.longestGapMs !== null)
      out.push(`webhook_inbox_longest_gap_seconds{${labels({ provider: a.provider, endpoint: a.endpoint })}} ${a.longestGapMs / 1000}`);
  const runs = snapshot.reconcile ?? [];
  family("webhook_reconcile_drifted", "Objects the latest reconciliation of the kind found drifted (every account's latest run).");
  for (const r of runs) out.push(`webhook_reconcile_drifted{${labels({ kind: r.kind })}} ${r.drifted}`);
  family("webhook_reconcile_repaired", "Of those, objects its --repair applied.");
  for (const r of runs) out.push(`webhook_reconcile_repaired{${labels({ kind: r.kind })}} ${r.repaired}`);
  family("webhook_reconcile_last_run_age_seconds", "Seconds since the latest reconciliation of the kind finished (its oldest account's).");
  for (const r of runs) out.push(`webhook_reconcile_last_run_age_seconds{${labels({ kind: r.kind })}} ${r.ageSec}`);
}

function labels(values: Record<string, string>): string {
  return Object.entries(values)
    .map(([k, v]) => `${k}="${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`)
    .join(",");
}
