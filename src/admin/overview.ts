// The overview: per endpoint, the last hour per minute by outcome, duplicates, backlogs; the outbox.
import type { Db } from "../db/db.ts";
import { activityPerMinute, type MinuteActivity } from "../ops/activity.ts";
import { inboxStatus } from "../ops/status.ts";
import { html, type Html } from "./html.ts";

/** Deliveries the running receiver answered, by outcome (in memory since it started; see `Metrics.deliveryCounts`). */
export type DeliveryCounts = () => readonly { provider: string; endpoint: string; outcome: string; count: number }[];

const OUTCOMES = ["processed", "ignored", "ignored_mode", "resolved", "unprocessed", "needs_review"] as const;
const MINUTES = 60;

/** A duration in seconds as operators read it: 42 s, 7 min, 3.5 h, 2.1 d. */
export function age(sec: number): string {
  if (sec < 120) return `${Math.round(sec)} s`;
  if (sec < 7200) return `${Math.round(sec / 60)} min`;
  if (sec < 172_800) return `${(sec / 3600).toFixed(1)} h`;
  return `${(sec / 86_400).toFixed(1)} d`;
}

/**
 * The overview's body: for each endpoint (configured ones first, then any the database holds) a
 * stacked bar per minute of the last hour (rows received, by their state now), the duplicate rate
 * since the receiver started (from `deliveries`, in memory: "n/a" without them, empty on workerd,
 * where the app lives for one request), unprocessed rows and the oldest one's age, needs-review rows
 * and, once event backfill has run for the endpoint, its checkpoint's age; its pauses (`inbox pause`:
 * since when, what they hold back, the command that lifts each); its unfinished backfill
 * requests with the command that finishes them; then the outbox.
 */
export async function overviewBody(
  db: Db,
  endpoints: readonly { provider: string; name: string }[],
  deliveries?: DeliveryCounts,
): Promise<Html> {
  const [status, activity] = await Promise.all([inboxStatus(db), activityPerMinute(db, MINUTES)]);
  const keys = new Map<string, { provider: string; endpoint: string }>();
  for (const e of endpoints) keys.set(`${e.provider}/${e.name}`, { provider: e.provider, endpoint: e.name });
  for (const b of status.backlog) keys.set(`${b.provider}/${b.endpoint}`, b);
  for (const a of activity) keys.set(`${a.provider}/${a.endpoint}`, a);
  const nowMinute = Math.floor(Date.now() / 60_000) * 60_000;
  const sections = [...keys.values()].map((k) => {
    const b = status.backlog.find((x) => x.provider === k.provider && x.endpoint === k.endpoint);
    const rows = activity.filter((a) => a.provider === k.provider && a.endpoint === k.endpoint);
    const counts = deliveries?.().filter((d) => d.provider === k.provider && d.endpoint === k.endpoint);
    const answered = counts?.filter((d) => d.outcome !== "rejected").reduce((n, d) => n + d.count, 0) ?? 0;
    const duplicates = counts?.find((d) => d.outcome === "duplicate")?.count ?? 0;
    const received = rows.reduce((n, r) => n + OUTCOMES.reduce((m, o) => m + count(r, o), 0), 0);
    const checkpoint = status.backfill.find((c) => c.provider === k.provider && c.endpoint === k.endpoint);
    // A request names an endpoint, not a provider.
    const waiting = status.backfillRequests.find((r) => r.endpoint === k.endpoint);
    // Events of the other mode (test at a live endpoint, or the reverse): recorded, never applied.
    // A pause names an endpoint (every provider's rows at that name): the whole endpoint, or accounts.
    const pauses = status.pauses.filter((p) => p.endpoint === k.endpoint);
    const otherMode = status.arrivals
      .filter((a) => a.provider === k.provider && a.endpoint === k.endpoint)
      .reduce((n, a) => n + a.ignoredMode, 0);
    return html`<section class="endpoint">
      <h2>${k.provider} / ${k.endpoint}</h2>
      <div class="tiles">
        ${pauses.map(
          (p) =>
            html`<div class="tile warn paused">
              <b>paused</b>${p.account === "" ? "every account" : p.account}, ${age(p.ageSec)}, ${p.held} held${p.note ? `: ${p.note}` : ""}
              (<code>bun run inbox resume --endpoint ${p.endpoint}${p.account === "" ? "" : ` --account ${p.account}`}</code>)
            </div>`,
        )}
        <div class="tile"><b>${received}</b>received, last hour</div>
        <div class="tile">
          <b>${counts === undefined ? "n/a" : answered === 0 ? "–" : `${((100 * duplicates) / answered).toFixed(1)} %`}</b>duplicates
          (${duplicates} of ${answered} answered since start)
        </div>
        <div class="tile${(b?.unprocessed ?? 0) > 0 ? " warn" : ""}">
          <b>${b?.unprocessed ?? 0}</b>unprocessed${b && b.unprocessed > 0 ? `, oldest ${age(b.oldestUnprocessedAgeSec)}` : ""}
        </div>
        <div class="tile${(b?.needsReview ?? 0) > 0 ? " warn" : ""}">
          <b><a href="/admin/events?state=needs_review&amp;endpoint=${encodeURIComponent(k.endpoint)}">${b?.needsReview ?? 0}</a></b
          >needs review
        </div>
        <div class="tile ignored-mode">
          <b><a href="/admin/events?state=ignored_mode&amp;endpoint=${encodeURIComponent(k.endpoint)}">${otherMode}</a></b
          >ignored (other mode), last hour
        </div>
        ${checkpoint ? html`<div class="tile checkpoint"><b>${age(checkpoint.ageSec)}</b>since the event backfill checkpoint</div>` : false}
        ${
          waiting &&
          html`<div class="tile warn">
            <b>${waiting.requests}</b>backfill request(s) unfinished, oldest ${age(waiting.oldestAgeSec)}: <code>${waiting.command}</code>
          </div>`
        }
      </div>
      ${chart(rows, nowMinute)}
    </section>`;
  });
  return html`${sections}
    <p class="legend">
      ${OUTCOMES.map((o) => html`<span><i class="${o}"></i>${o.replace("_", "-")}</span>`)} · one bar per minute, the last hour; rows
      received, by their state now
    </p>
    <h2>Outbox</h2>
    <div class="tiles">
      <div class="tile${status.outbox.pending > 0 ? " warn" : ""}">
        <b>${status.outbox.pending}</b>pending${status.outbox.pending > 0 ? `, oldest ${age(status.outbox.oldestPendingAgeSec)}` : ""}
      </div>
      <div class="tile${status.outbox.needsReview > 0 ? " warn" : ""}"><b>${status.outbox.needsReview}</b>needs review</div>
    </div>`;
}

function count(r: MinuteActivity, outcome: (typeof OUTCOMES)[number]): number {
  return outcome === "needs_review" ? r.needsReview : outcome === "ignored_mode" ? r.ignoredMode : r[outcome];
}

/** Stacked bars, one per minute of the last hour ending at `nowMinute` (ms), as inline SVG (no script, no style attributes). */
function chart(rows: readonly MinuteActivity[], nowMinute: number): Html {
  const width = 14;
  const height = 60;
  /** Room above the bars for the peak label. */
  const top = 14;
  const byMinute = new Map(rows.map((r) => [Date.parse(r.minute), r]));
  const peak = Math.max(1, ...rows.map((r) => OUTCOMES.reduce((n, o) => n + count(r, o), 0)));
  const bars: Html[] = [];
  for (let i = 0; i < MINUTES; i++) {
    const minute = nowMinute - (MINUTES - 1 - i) * 60_000;
    const r = byMinute.get(minute);
    if (!r) continue;
    let y = top + height;
    for (const o of OUTCOMES) {
      const h = (count(r, o) / peak) * height;
      if (h === 0) continue;
      y -= h;
      bars.push(
        html`<rect class="${o}" x="${i * width}" y="${y.toFixed(1)}" width="${width - 1}" height="${h.toFixed(1)}"
          ><title>${new Date(minute).toISOString().slice(11, 16)} UTC: ${count(r, o)} ${o}</title></rect
        >`,
      );
    }
  }
  return html`<svg
    class="chart"
    role="img"
    aria-label="rows received per minute, last hour"
    width="${MINUTES * width}"
    height="${top + height + 14}"
    viewBox="0 0 ${MINUTES * width} ${top + height + 14}"
  >
    ${bars}
    <text x="0" y="${top + height + 12}" font-size="10">−60 min</text>
    <text x="${MINUTES * width}" y="${top + height + 12}" font-size="10" text-anchor="end">now</text>
    <text x="${MINUTES * width}" y="10" font-size="10" text-anchor="end">peak ${peak}/min</text>
  </svg>`;
}
