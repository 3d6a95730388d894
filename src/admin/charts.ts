// The overview's charts as inline SVG drawn on the server: no script, no style attributes (the CSP allows
// neither), colours from the stylesheet's classes.
import type { MinuteActivity } from "../ops/activity.ts";
import type { DayHealth } from "../ops/health.ts";
import { html, type Html } from "./html.ts";

/** Outcomes of the last-hour chart, bottom to top, as the row states name them. */
export const OUTCOMES = ["processed", "ignored", "ignored_mode", "resolved", "unprocessed", "needs_review"] as const;
const MINUTES = 60;

/** Rows of one outcome in one minute. */
export function countOf(r: MinuteActivity, outcome: (typeof OUTCOMES)[number]): number {
  return outcome === "needs_review" ? r.needsReview : outcome === "ignored_mode" ? r.ignoredMode : r[outcome];
}

/** Stacked bars, one per minute of the last hour ending at `nowMinute` (ms), rows received by their state now. */
export function minuteChart(rows: readonly MinuteActivity[], nowMinute: number): Html {
  const width = 14;
  const height = 60;
  /** Room above the bars for the peak label. */
  const top = 14;
  const byMinute = new Map(rows.map((r) => [Date.parse(r.minute), r]));
  const peak = Math.max(1, ...rows.map((r) => OUTCOMES.reduce((n, o) => n + countOf(r, o), 0)));
  const bars: Html[] = [];
  for (let i = 0; i < MINUTES; i++) {
    const minute = nowMinute - (MINUTES - 1 - i) * 60_000;
    const r = byMinute.get(minute);
    if (!r) continue;
    let y = top + height;
    for (const o of OUTCOMES) {
      const h = (countOf(r, o) / peak) * height;
      if (h === 0) continue;
      y -= h;
      bars.push(
        html`<rect class="${o}" x="${i * width}" y="${y.toFixed(1)}" width="${width - 1}" height="${h.toFixed(1)}"
          ><title>${new Date(minute).toISOString().slice(11, 16)} UTC: ${countOf(r, o)} ${o}</title></rect
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

/** A duration in seconds as operators read it: 42 s, 7 min, 3.5 h, 2.1 d. */
export function age(sec: number): string {
  if (sec < 120) return `${Math.round(sec)} s`;
  if (sec < 7200) return `${Math.round(sec / 60)} min`;
  if (sec < 172_800) return `${(sec / 3600).toFixed(1)} h`;
  return `${(sec / 86_400).toFixed(1)} d`;
}

/** A duration in ms as operators read it: 0 ms, 850 ms, 2.4 s, 3.1 min, 1.5 h. */
export function duration(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7_200_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

/** The five 30-day series, each its own small chart. */
const SERIES = [
  { key: "received", title: "received", value: (d: DayHealth) => d.received, text: (d: DayHealth) => `${d.received} received` },
  {
    key: "failed",
    title: "failed at least once",
    value: (d: DayHealth) => d.failed,
    text: (d: DayHealth) => `${d.failed} failed at least once`,
  },
  {
    key: "needs_review",
    title: "needs review (parked or resolved)",
    value: (d: DayHealth) => d.needsReview,
    text: (d: DayHealth) => `${d.needsReview} needed review`,
  },
  {
    key: "backlog",
    title: "backlog (peak unsettled)",
    value: (d: DayHealth) => d.backlogPeak,
    text: (d: DayHealth) => `at most ${d.backlogPeak} unsettled at an hour's end`,
  },
  {
    key: "latency",
    title: "latency (worst hour's p95)",
    value: (d: DayHealth) => d.latencyP95Ms ?? 0,
    text: (d: DayHealth) =>
      d.latencyP95Ms === null ? "nothing processed" : `p95 ${duration(d.latencyP95Ms)} (worst hour), max ${duration(d.latencyMaxMs ?? 0)}`,
  },
] as const;

/**
 * One endpoint's days (oldest first) as five small bar charts: rows received, failed at least once,
 * needing review, the backlog's peak and the worst hour's p95 latency. Every day has a bar (height 0
 * when nothing) with a title giving its date and figure; a day whose hours are not all computed yet is
 * drawn `partial`.
 */
export function dayCharts(days: readonly DayHealth[]): Html {
  const width = 8;
  const height = 40;
  const top = 12;
  return html`<div class="days">
    ${SERIES.map((s) => {
      const peak = Math.max(0, ...days.map(s.value));
      const scale = peak === 0 ? 0 : height / peak;
      const label = s.key === "latency" ? duration(peak) : String(peak);
      return html`<figure class="day-chart series-${s.key}">
        <figcaption>${s.title}</figcaption>
        <svg
          role="img"
          aria-label="${s.title}, per day, last ${days.length} days"
          width="${days.length * width}"
          height="${top + height + 12}"
          viewBox="0 0 ${days.length * width} ${top + height + 12}"
        >
          ${days.map((d, i) => {
            const h = s.value(d) * scale;
            const title = `${new Date(d.day).toISOString().slice(0, 10)}: ${s.text(d)}${d.complete ? "" : " (some hours not computed yet)"}`;
            const cls = `${s.key}${d.complete ? "" : " partial"}`;
            return html`<rect
              class="${cls}"
              x="${i * width}"
              y="${(top + height - h).toFixed(1)}"
              width="${width - 1}"
              height="${h.toFixed(1)}"
              ><title>${title}</title></rect
            >`;
          })}
          <text x="${days.length * width}" y="9" font-size="9" text-anchor="end">peak ${label}</text>
          <text x="0" y="${top + height + 10}" font-size="9">−${days.length - 1} d</text>
          <text x="${days.length * width}" y="${top + height + 10}" font-size="9" text-anchor="end">today</text>
        </svg>
      </figure>`;
    })}
  </div>`;
}
