// The overview's workers and dispatchers: one row each from its heartbeat (loop/heartbeat.ts), and a
// warning when work waits and none of the kind that does it is alive.
import type { LoopProcess } from "../loop/heartbeat.ts";
import { age } from "./charts.ts";
import { html, type Html } from "./html.ts";

/**
 * The "Workers and dispatchers" section: every heartbeat row of the last day (alive ones first: kind,
 * host, pid, what it serves, state, last beat, last claim, rows claimed, started) and a warning line
 * per kind when rows wait (`waiting.inbox` unprocessed rows, `waiting.outbox` pending messages) and no
 * process of that kind is alive.
 */
export function processesSection(processes: readonly LoopProcess[], waiting: { inbox: number; outbox: number }): Html {
  const alive = (kind: LoopProcess["kind"]) => processes.filter((p) => p.kind === kind && p.state === "alive").length;
  const warnings: Html[] = [];
  if (waiting.inbox > 0 && alive("worker") === 0)
    warnings.push(
      html`<p class="error no-worker">No worker is alive: ${waiting.inbox} row(s) wait for one (<code>bun run worker</code>).</p>`,
    );
  if (waiting.outbox > 0 && alive("dispatcher") === 0)
    warnings.push(
      html`<p class="error no-dispatcher">
        No dispatcher is alive: ${waiting.outbox} outbox message(s) wait for one (<code>bun run dispatch</code>).
      </p>`,
    );
  const table =
    processes.length === 0
      ? html`<p class="note">No worker or dispatcher has run in the last day.</p>`
      : html`<table class="processes">
          <thead>
            <tr>
              <th>kind</th>
              <th>state</th>
              <th>host</th>
              <th>pid</th>
              <th>serves</th>
              <th>last beat</th>
              <th>last claim</th>
              <th>claimed</th>
              <th>started (UTC)</th>
            </tr>
          </thead>
          <tbody>
            ${processes.map(
              (p) =>
                html`<tr class="${p.state}">
                  <td>${p.kind}</td>
                  <td class="state">${p.state}</td>
                  <td>${p.host}</td>
                  <td class="n">${p.pid}</td>
                  <td>${p.detail}</td>
                  <td>${age(p.beatAgeSec)} ago</td>
                  <td>${p.lastClaimAgeSec === null ? "none yet" : `${age(p.lastClaimAgeSec)} ago`}</td>
                  <td class="n">${p.claimed}</td>
                  <td>${p.startedAt.replace("T", " ").slice(0, 19)}</td>
                </tr>`,
            )}
          </tbody>
        </table>`;
  return html`<section class="processes">
    <h2>Workers and dispatchers</h2>
    ${warnings} ${table}
    <p class="note">
      Each beats its row every <code>--heartbeat-ms</code> (10 s by default); three beats missed read as dead (killed, or its host lost).
    </p>
  </section>`;
}
