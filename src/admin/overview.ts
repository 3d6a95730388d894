// The overview: workers and dispatchers, then per endpoint its mode, tiles, the last hour per minute and
// 30 days per day, then the outbox. Each part is a section of its own, built from data read once.
import type { Db } from "../db/db.ts";
import type { Backlog } from "../inbox/backlog.ts";
import { activityPerMinute, type MinuteActivity } from "../ops/activity.ts";
import { readHealth, type EndpointHealth } from "../ops/health.ts";
import { outboxByType } from "../ops/outbox.ts";
import { inboxStatus, type InboxStatus } from "../ops/status.ts";
import { age, countOf, dayCharts, duration, minuteChart, OUTCOMES } from "./charts.ts";
import { html, Html } from "./html.ts";
import { outboxSection } from "./outbox-page.ts";
import { processesSection } from "./processes.ts";

/** Deliveries the running receiver answered, by outcome (in memory since it started; see `Metrics.deliveryCounts`). */
export type DeliveryCounts = () => readonly { provider: string; endpoint: string; outcome: string; count: number }[];

/** A configured endpoint as the overview describes it. */
export interface OverviewEndpoint {
  provider: string;
  name: string;
  /** Processing mode: sync, async or hybrid. */
  mode?: string;
  /** Stripe's mode it applies (`live`, `test`, or `both` accepted); undefined for a provider without modes. */
  stripeMode?: "live" | "test" | "both";
  /** Other settings worth a word: `thin`, `refetch`, `connect`. */
  traits?: readonly string[];
}

/** Everything one endpoint's section shows. */
interface EndpointView {
  provider: string;
  endpoint: string;
  configured?: OverviewEndpoint;
  backlog?: Backlog;
  minutes: MinuteActivity[];
  health?: EndpointHealth;
}

/**
 * The overview's body: the workers and dispatchers (heartbeats), then each endpoint (configured ones
 * first, then any the database holds) with its mode, tiles ({@link endpointTiles}), a stacked bar per
 * minute of the last hour (rows received, by their state now) and 30 days per day (src/ops/health.ts:
 * the hourly rollup, up to 24 closed hours of it computed by this load), then the outbox.
 */
export async function overviewBody(db: Db, endpoints: readonly OverviewEndpoint[], deliveries?: DeliveryCounts): Promise<Html> {
  const [status, activity, health, byType] = await Promise.all([
    inboxStatus(db),
    activityPerMinute(db, 60),
    readHealth(db, endpoints),
    outboxByType(db),
  ]);
  const processes = status.processes;
  const views = new Map<string, EndpointView>();
  const view = (provider: string, endpoint: string): EndpointView => {
    const key = `${provider}/${endpoint}`;
    let v = views.get(key);
    if (!v) views.set(key, (v = { provider, endpoint, minutes: [] }));
    return v;
  };
  for (const e of endpoints) view(e.provider, e.name).configured = e;
  for (const b of status.backlog) view(b.provider, b.endpoint).backlog = b;
  for (const a of activity) view(a.provider, a.endpoint).minutes.push(a);
  for (const h of health.endpoints) view(h.provider, h.endpoint).health = h;
  const nowMinute = Math.floor(Date.now() / 60_000) * 60_000;
  const waiting = status.backlog.reduce((n, b) => n + b.unprocessed, 0);
  return html`${processesSection(processes, { inbox: waiting, outbox: status.outbox.pending })}
    ${[...views.values()].map((v) => endpointSection(v, status, deliveries, nowMinute))}
    <p class="legend">
      ${OUTCOMES.map((o) => html`<span><i class="${o}"></i>${o.replace("_", "-")}</span>`)} · one bar per minute, the last hour; rows
      received, by their state now. Below each, one bar per day (UTC) of the last 30 days: rows received that day, those that failed at
      least once, those that needed review, the most rows unsettled at an hour's end, and the worst hour's 95th percentile from arrival to
      applied.
      ${health.missingHours > 0 ? `${health.missingHours} closed hour(s) of them are not computed yet (each page load computes up to 24, each /metrics scrape one): reload.` : ""}
    </p>
    ${outboxSection(status.outbox, byType, processes)}`;
}

/** One endpoint: its name and mode, its tiles, the last hour, 30 days. */
function endpointSection(v: EndpointView, status: InboxStatus, deliveries: DeliveryCounts | undefined, nowMinute: number): Html {
  const c = v.configured;
  const mode = c
    ? [c.mode ?? "sync", ...(c.stripeMode ? [c.stripeMode === "both" ? "live and test" : c.stripeMode] : []), ...(c.traits ?? [])].join(
        " · ",
      )
    : "not configured";
  return html`<section class="endpoint">
    <h2>${v.provider} / ${v.endpoint} <span class="mode">${mode}</span></h2>
    <div class="tiles">${endpointTiles(v, status, deliveries)}</div>
    ${minuteChart(v.minutes, nowMinute)} ${v.health ? dayCharts(v.health.days) : false}
  </section>`;
}

/**
 * An endpoint's tiles, each its own item (a new tile is one more entry): received in the last hour, the
 * duplicate rate since the receiver started (from its in-memory counters: "n/a" without them, empty on
 * workerd), unprocessed with the oldest one's age, needs-review, events of the other Stripe mode (only
 * for endpoints of a provider with modes, or where such rows exist), the newest arrival and the longest
 * silence of the week, the event backfill checkpoint's age once backfill ran, and unfinished backfill
 * requests with the command that finishes them.
 */
function endpointTiles(v: EndpointView, status: InboxStatus, deliveries: DeliveryCounts | undefined): Html[] {
  const { provider, endpoint, backlog: b } = v;
  const counts = deliveries?.().filter((d) => d.provider === provider && d.endpoint === endpoint);
  const answered = counts?.filter((d) => d.outcome !== "rejected").reduce((n, d) => n + d.count, 0) ?? 0;
  const duplicates = counts?.find((d) => d.outcome === "duplicate")?.count ?? 0;
  const received = v.minutes.reduce((n, r) => n + OUTCOMES.reduce((m, o) => m + countOf(r, o), 0), 0);
  const checkpoint = status.backfill.find((x) => x.provider === provider && x.endpoint === endpoint);
  // A request names an endpoint, not a provider.
  const waiting = status.backfillRequests.find((r) => r.endpoint === endpoint);
  // Events of the other mode (test at a live endpoint, or the reverse): recorded, never applied.
  const otherMode = status.arrivals
    .filter((a) => a.provider === provider && a.endpoint === endpoint)
    .reduce((n, a) => n + a.ignoredMode, 0);
  const hasModes = v.configured ? v.configured.stripeMode !== undefined : otherMode > 0;
  const h = v.health;
  const silence = h?.silenceMs == null ? undefined : h.silenceMs / 1000;
  // A pause names an endpoint (every provider's rows at that name): the whole endpoint, or one connected account.
  const pauses = status.pauses.filter((p) => p.endpoint === endpoint);
  const tiles: (Html | false | undefined)[] = [
    ...pauses.map(
      (p) =>
        html`<div class="tile warn paused">
          <b>paused</b>${p.account === "" ? "every account" : p.account}, ${age(p.ageSec)}, ${p.held} held${p.note ? `: ${p.note}` : ""}
          (<code>bun run inbox resume --endpoint ${p.endpoint}${p.account === "" ? "" : ` --account ${p.account}`}</code>)
        </div>`,
    ),
    html`<div class="tile"><b>${received}</b>received, last hour</div>`,
    html`<div class="tile">
      <b>${counts === undefined ? "n/a" : answered === 0 ? "–" : `${((100 * duplicates) / answered).toFixed(1)} %`}</b>duplicates
      (${duplicates} of ${answered} answered since start)
    </div>`,
    html`<div class="tile${(b?.unprocessed ?? 0) > 0 ? " warn" : ""}">
      <b>${b?.unprocessed ?? 0}</b>unprocessed${b && b.unprocessed > 0 ? `, oldest ${age(b.oldestUnprocessedAgeSec)}` : ""}
    </div>`,
    html`<div class="tile${(b?.needsReview ?? 0) > 0 ? " warn" : ""}">
      <b><a href="/admin/events?state=needs_review&amp;endpoint=${encodeURIComponent(endpoint)}">${b?.needsReview ?? 0}</a></b
      >needs review
    </div>`,
    hasModes &&
      html`<div class="tile ignored-mode">
        <b><a href="/admin/events?state=ignored_mode&amp;endpoint=${encodeURIComponent(endpoint)}">${otherMode}</a></b
        >ignored (other mode), last hour
      </div>`,
    silence !== undefined &&
      html`<div class="tile silence${h?.longestGapMs != null && silence * 1000 > h.longestGapMs ? " warn" : ""}">
        <b>${age(silence)}</b>since the last event${h?.longestGapMs != null ? `; longest gap this week ${duration(h.longestGapMs)}` : ""}
      </div>`,
    checkpoint && html`<div class="tile checkpoint"><b>${age(checkpoint.ageSec)}</b>since the event backfill checkpoint</div>`,
    waiting &&
      html`<div class="tile warn">
        <b>${waiting.requests}</b>backfill request(s) unfinished, oldest ${age(waiting.oldestAgeSec)}: <code>${waiting.command}</code>
      </div>`,
  ];
  return tiles.filter((t): t is Html => t instanceof Html);
}
