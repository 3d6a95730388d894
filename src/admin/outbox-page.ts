// The outbox on the operator's page: its backlog on the overview (by message type, and the sinks the live
// dispatchers deliver to), the list of unpublished messages at /admin/outbox, and requeueing a parked one.
import type { Db } from "../db/db.ts";
import type { OutboxBacklog } from "../inbox/backlog.ts";
import type { LoopProcess } from "../loop/heartbeat.ts";
import { listOutbox, requeueOutbox, type OutboxTypeBacklog } from "../ops/outbox.ts";
import type { ActionResult } from "./actions.ts";
import { age } from "./charts.ts";
import type { CsrfFields } from "./event-page.ts";
import { clip } from "./events-page.ts";
import { html, type Html } from "./html.ts";

/** Messages listed on /admin/outbox at most, oldest first. */
export const OUTBOX_ROWS = 100;

/**
 * The overview's outbox: pending (with the oldest one's age) and parked counts linked to the list, the
 * unpublished messages by type, and the sinks the live dispatchers deliver to (each dispatcher delivers
 * every message to its one `OUTBOX_SINK_URL`; their heartbeat names its origin).
 */
export function outboxSection(backlog: OutboxBacklog, byType: readonly OutboxTypeBacklog[], processes: readonly LoopProcess[]): Html {
  const sinks = [...new Set(processes.filter((p) => p.kind === "dispatcher" && p.state === "alive").map((p) => p.detail))];
  return html`<section class="outbox">
    <h2>Outbox</h2>
    <div class="tiles">
      <div class="tile${backlog.pending > 0 ? " warn" : ""}">
        <b><a href="/admin/outbox">${backlog.pending}</a></b
        >pending${backlog.pending > 0 ? `, oldest ${age(backlog.oldestPendingAgeSec)}` : ""}
      </div>
      <div class="tile${backlog.needsReview > 0 ? " warn" : ""}">
        <b><a href="/admin/outbox?state=needs_review">${backlog.needsReview}</a></b
        >needs review (failed)
      </div>
    </div>
    ${
      byType.length === 0
        ? html`<p class="note">Nothing unpublished.</p>`
        : html`<table class="outbox-types">
            <thead>
              <tr>
                <th>message type</th>
                <th>pending</th>
                <th>needs review</th>
                <th>oldest</th>
              </tr>
            </thead>
            <tbody>
              ${byType.map(
                (t) =>
                  html`<tr>
                    <td>${t.eventType}</td>
                    <td class="n">${t.pending}</td>
                    <td class="n">${t.needsReview}</td>
                    <td>${age(t.oldestAgeSec)}</td>
                  </tr>`,
              )}
            </tbody>
          </table>`
    }
    <p class="note sinks">
      Sinks of the live dispatchers: ${sinks.length === 0 ? "none (no dispatcher is alive)" : sinks.join("; ")}.
      <a href="/admin/outbox">Every unpublished message →</a>
    </p>
  </section>`;
}

/**
 * The /admin/outbox page: unpublished messages oldest first (at most {@link OUTBOX_ROWS}; `state=needs_review`
 * only the parked ones) with their account, attempts and last error, never their payload; a parked one
 * gets a Requeue button unless `readonly`.
 */
export async function outboxBody(db: Db, params: URLSearchParams, readonly: boolean, csrf: CsrfFields): Promise<Html> {
  const parkedOnly = params.get("state") === "needs_review";
  const rows = await listOutbox(db, { needsReview: parkedOnly }, OUTBOX_ROWS);
  const head = html`<p>
    ${parkedOnly ? html`<a href="/admin/outbox">All unpublished</a> · <strong>Needs review</strong>` : html`<strong>All unpublished</strong> · <a href="/admin/outbox?state=needs_review">Needs review</a>`}
    (oldest first, at most ${OUTBOX_ROWS}; published messages are history: <code>bun run inbox outbox</code> lists the same)
  </p>`;
  if (rows.length === 0)
    return html`${head}
      <p class="note">No message waits.</p>`;
  const cells: Html[] = [];
  for (const r of rows)
    cells.push(
      html`<tr class="${r.state}">
        <td class="n">${r.id}</td>
        <td>${r.eventType}</td>
        <td>${r.aggregateType} ${r.aggregateId}</td>
        <td>${r.account || "platform"}</td>
        <td class="state">${r.state}</td>
        <td class="n">${r.attempts}</td>
        <td>${r.createdAt.replace("T", " ").slice(0, 19)}</td>
        <td>${clip(r.lastError ?? "", 140)}</td>
        <td>
          ${
            !readonly && r.state === "needs_review"
              ? html`<form class="inline" method="post" action="/admin/outbox/${r.id}/requeue">
                  ${await csrf()}<button type="submit">Requeue</button>
                </form>`
              : false
          }
        </td>
      </tr>`,
    );
  return html`${head}
    <table class="outbox-messages">
      <thead>
        <tr>
          <th>id</th>
          <th>type</th>
          <th>aggregate</th>
          <th>account</th>
          <th>state</th>
          <th>attempts</th>
          <th>created (UTC)</th>
          <th>last error</th>
          <th></th>
        </tr>
      </thead>
      <tbody>
        ${cells}
      </tbody>
    </table>`;
}

/** `POST /admin/outbox/<id>/requeue`: the parked message back to the dispatchers (`requeueOutbox`); 409 when it is not parked. */
export async function requeueOutboxAction(db: Db, id: string): Promise<ActionResult> {
  const back = html`<p><a href="/admin/outbox">Back to the outbox</a></p>`;
  const requeued = await requeueOutbox(db, [id]);
  return requeued.length === 1
    ? {
        status: 200,
        body: html`<p class="ok">Requeued outbox message ${id}: attempts reset, dispatchers woken.</p>
          ${back}`,
      }
    : {
        status: 409,
        body: html`<p class="error">Nothing requeued: outbox message ${id} is not needs-review.</p>
          ${back}`,
      };
}
