// Bulk actions on the filtered needs-review rows: a confirmation that counts them exactly, then an
// apply that touches those rows only, or nothing when the set changed meanwhile.
import type { Db } from "../db/db.ts";
import { requeue } from "../ops/requeue.ts";
import { resolveReviewed } from "../ops/resolve.ts";
import { applyToSelection, selectNeedsReview } from "../ops/selection.ts";
import { describeFilter, filterFields, type AdminFilter } from "./filters.ts";
import { html, type Html } from "./html.ts";
import { withFilter } from "./events-page.ts";
import type { ActionResult } from "./actions.ts";
import type { CsrfFields } from "./event-page.ts";

/** A bulk action. */
export type BulkAction = "requeue" | "resolve";

/**
 * The confirmation (a dry run): the filter in words and how many needs-review rows it names now,
 * with a form that carries the filter (`since` as an absolute time), that count and the rows' digest
 * ({@link selectNeedsReview}); `resolve` asks for the note. Nothing changes.
 */
export async function confirmBody(db: Db, action: BulkAction, filter: AdminFilter, csrf: CsrfFields): Promise<Html> {
  const selection = await selectNeedsReview(db, filter.rows);
  const back = html`<p><a href="${withFilter("/admin/events", filter)}">Back to the rows</a></p>`;
  if (selection.count === 0)
    return html`<p>No needs-review row matches ${describeFilter(filter)}: nothing to ${action}.</p>
      ${back}`;
  return html`<p>Filter: <strong class="filter">${describeFilter({ rows: { ...filter.rows, state: "needs_review" } })}</strong></p>
    <p>
      This will ${action} exactly <strong class="count">${selection.count}</strong> needs-review
      row(s)${action === "requeue" ? " (attempts reset, due now, workers woken)" : " (closed with your note; no handler runs)"}. If any row
      joins or leaves this set before you apply, nothing is done and you are shown the new count.
    </p>
    <form method="post" action="/admin/bulk">
      ${await csrf()}
      <input type="hidden" name="action" value="${action}" />
      ${filterFields(filter).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}" />`)}
      <input type="hidden" name="count" value="${selection.count}" />
      <input type="hidden" name="digest" value="${selection.digest}" />
      ${
        action === "resolve"
          ? html`<p>
              <label>Note (kept on every row) <input name="note" required size="60" /></label>
            </p>`
          : false
      }
      <button type="submit">${action === "requeue" ? "Requeue" : "Resolve"} ${selection.count} row(s)</button>
    </form>
    ${back}`;
}

/**
 * Applies `action` to the needs-review rows of `filter` if they are still exactly the confirmed
 * `count` rows with `digest` ({@link applyToSelection}); answers 200 with what was done, or 409 with
 * the new count and nothing done.
 */
export async function applyBulk(
  db: Db,
  action: BulkAction,
  filter: AdminFilter,
  expected: { count: number; digest: string },
  note: string,
): Promise<ActionResult> {
  if (action === "resolve" && note.trim() === "") return { status: 400, body: html`<p class="error">Resolve needs a note.</p>` };
  const outcome = await applyToSelection(db, filter.rows, expected, (tx) =>
    action === "requeue" ? requeue(tx, filter.rows, false) : resolveReviewed(tx, filter.rows, note, false),
  );
  const again = withFilter("/admin/bulk", filter, [["action", action]]);
  if (!outcome.applied) {
    return {
      status: 409,
      body: html`<p class="error">
          Nothing was done: the rows changed since the confirmation (${expected.count} then, ${outcome.now.count} now).
        </p>
        <p><a href="${again}">Review the new set</a></p>`,
    };
  }
  const rows = outcome.result.rows;
  return {
    status: 200,
    body: html`<p class="ok">${action === "requeue" ? "Requeued" : "Resolved"} <strong class="count">${rows.length}</strong> row(s).</p>
      <table>
        <tr>
          <th>endpoint</th>
          <th>event</th>
          <th>type</th>
        </tr>
        ${rows.map(
          (r) =>
            html`<tr>
              <td>${r.endpoint}</td>
              <td>${r.eventId}</td>
              <td>${r.eventType}</td>
            </tr>`,
        )}
      </table>
      <p><a href="${withFilter("/admin/events", filter)}">Back to the rows</a></p>`,
  };
}
