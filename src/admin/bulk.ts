// Bulk actions on the filtered needs-review rows: a confirmation that counts them exactly, then an
// apply that touches those rows only, or nothing when the set changed meanwhile.
import type { Db } from "../db/db.ts";
import { requeue } from "../ops/requeue.ts";
import { resolveReviewed } from "../ops/resolve.ts";
import { applyToSelection, selectNeedsReview } from "../ops/selection.ts";
import { describeFilter, filterFields, readFilter, type AdminFilter } from "./filters.ts";
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

/** A bulk apply's form, read and checked: what {@link applyBulk} takes. */
export interface BulkForm {
  action: BulkAction;
  filter: AdminFilter;
  /** The confirmation's count of rows and digest of their keys ({@link confirmBody}). */
  expected: { count: number; digest: string };
  /** The resolution note (non-blank for `resolve`; unused by `requeue`). */
  note: string;
}

/**
 * Reads the form fields of a bulk apply (`POST /admin/bulk`), as the confirmation's form sends them:
 * `action` (`requeue` or `resolve`); the filter fields of {@link readFilter} (`state`, `type`,
 * `endpoint`, `since`, `attempts`, `id`, `account`; never `text`), a relative `since` counted back from `nowMs`
 * (ms since the epoch); `count` (a whole number) and `digest` (32 lowercase hex digits) from
 * {@link confirmBody}; `note` (non-blank) for `resolve`. Returns the form, or `problems` (operator
 * messages, each naming its field) when any field is missing or invalid; never throws.
 */
export function readBulkForm(params: URLSearchParams, nowMs: number): BulkForm | { problems: string[] } {
  const field = (name: string) => params.get(name) ?? "";
  const action = field("action") === "requeue" || field("action") === "resolve" ? (field("action") as BulkAction) : undefined;
  const bad: string[] = [];
  if (!action) bad.push("action (requeue or resolve)");
  if (!/^\d{1,9}$/.test(field("count"))) bad.push("count (a whole number)");
  if (!/^[0-9a-f]{32}$/.test(field("digest"))) bad.push("digest (32 hex digits, from the confirmation)");
  if (action === "resolve" && field("note").trim() === "") bad.push("note (what was done, kept on every row)");
  const filter = readFilter(params, nowMs);
  if (filter.text !== undefined) bad.push("text (a bulk action takes no payload search)");
  const problems = [...(bad.length > 0 ? [`missing or invalid form field(s) ${bad.join(", ")}`] : []), ...filter.problems];
  if (!action || problems.length > 0) return { problems };
  return { action, filter, expected: { count: Number(field("count")), digest: field("digest") }, note: field("note") };
}

/**
 * Applies `action` to the needs-review rows of `filter` if they are still exactly the confirmed
 * `count` rows with `digest` ({@link applyToSelection}); answers 200 with what was done, or 409 with
 * the new count and nothing done. Its arguments come from {@link readBulkForm}, which has checked
 * them (a non-blank `note` for `resolve`).
 */
export async function applyBulk(
  db: Db,
  action: BulkAction,
  filter: AdminFilter,
  expected: { count: number; digest: string },
  note: string,
): Promise<ActionResult> {
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
