// The events list: filters, a page of rows newest first, the next page's link, the bulk actions.
import type { Db } from "../db/db.ts";
import { pageEvents, PageTooSlowError, TEXT_SCAN_ROWS, type EventSummary } from "../ops/events.ts";
import { filterFields, type AdminFilter } from "./filters.ts";
import { html, type Html } from "./html.ts";

const PAGE_ROWS = 50;

/** Longest a page of rows may take to read, ms: past it the operator is asked to narrow the filter. */
export const PAGE_MAX_MS = 3_000;

/** The link to one event's page. */
export function eventHref(eventId: string): string {
  return `/admin/events/${encodeURIComponent(eventId)}`;
}

/** `path` with the filter (and `extra`) as its query string. */
export function withFilter(path: string, filter: Pick<AdminFilter, "rows" | "text">, extra: [string, string][] = []): string {
  const query = new URLSearchParams([...filterFields(filter), ...extra]).toString();
  return query ? `${path}?${query}` : path;
}

/**
 * The events page's body for `filter` from cursor `after`: the filter form (filled in), the page of
 * rows, an "older" link, and, unless `readonly`, links to the bulk requeue and resolve confirmations
 * of the filtered needs-review rows. Filter problems are shown instead of rows.
 * @throws Error from `pageEvents` for a cursor it did not make.
 */
export async function eventsBody(
  db: Db,
  filter: AdminFilter,
  raw: URLSearchParams,
  after: string | undefined,
  readonly: boolean,
): Promise<Html> {
  const form = filterForm(raw);
  if (filter.problems.length)
    return html`${form}
      <ul class="error">
        ${filter.problems.map((p) => html`<li>${p}</li>`)}
      </ul>`;
  const result = await pageEvents(db, filter.rows, { limit: PAGE_ROWS, after, text: filter.text, maxMs: PAGE_MAX_MS }).catch(
    (err: unknown) => {
      if (err instanceof PageTooSlowError) return err;
      throw err;
    },
  );
  if (result instanceof PageTooSlowError)
    return html`${form}
      <p class="error">${result.message}.</p>`;
  const bulk =
    readonly || filter.text !== undefined
      ? false
      : html`<p>
          Bulk, on the needs-review rows of this filter:
          <a href="${withFilter("/admin/bulk", filter, [["action", "requeue"]])}">requeue…</a> ·
          <a href="${withFilter("/admin/bulk", filter, [["action", "resolve"]])}">resolve…</a> (a confirmation with the exact count comes
          first)
        </p>`;
  return html`${form}
    ${filter.text !== undefined ? html`<p class="note">Payload search read the ${result.scanned} newest rows matching the other filters${after ? " past the previous page" : ""} (at most ${TEXT_SCAN_ROWS.toLocaleString("en")} per page); "Older" searches further back.</p>` : false}
    ${bulk} ${rowsTable(result.rows)}
    <p>
      ${after ? html`<a href="${withFilter("/admin/events", filter)}">Newest</a> · ` : false}${result.next ? html`<a href="${withFilter("/admin/events", filter, [["after", result.next]])}">Older →</a>` : html`<span class="note">No older rows.</span>`}
    </p>`;
}

function rowsTable(rows: readonly EventSummary[]): Html {
  if (rows.length === 0) return html`<p class="note">No rows match.</p>`;
  return html`<table class="events">
    <thead>
      <tr>
        <th>received (UTC)</th>
        <th>endpoint</th>
        <th>event</th>
        <th>type</th>
        <th>account</th>
        <th>state</th>
        <th>attempts</th>
        <th>last error</th>
      </tr>
    </thead>
    <tbody>
      ${rows.map(
        (r) =>
          html`<tr>
            <td>${r.receivedAt.replace("T", " ").slice(0, 19)}</td>
            <td>${r.endpoint}</td>
            <td><a href="${eventHref(r.eventId)}">${r.eventId}</a></td>
            <td>${r.eventType}</td>
            <td class="account">${r.account || "platform"}</td>
            <td>${r.state}</td>
            <td class="n">${r.attempts}</td>
            <td>${clip(r.lastError ?? "", 140)}</td>
          </tr>`,
      )}
    </tbody>
  </table>`;
}

/** `text` cut to `max` characters with an ellipsis. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function filterForm(raw: URLSearchParams): Html {
  const v = (name: string) => raw.get(name) ?? "";
  const state = v("state");
  return html`<form class="filters" method="get" action="/admin/events">
    <label
      >state<select name="state">
        ${["", "needs_review", "unprocessed", "processed", "ignored", "resolved"].map(
          (s) => html`<option value="${s}" ${s === state ? html` selected` : false}>${s || "any"}</option>`,
        )}
      </select></label
    >
    <label>type<input name="type" value="${v("type")}" placeholder="invoice.paid" /></label>
    <label>endpoint<input name="endpoint" value="${v("endpoint")}" size="10" /></label>
    <label>since<input name="since" value="${v("since")}" placeholder="2h or ISO" size="12" /></label>
    <label>attempts ≥<input name="attempts" value="${v("attempts")}" size="4" /></label>
    <label>event id<input name="id" value="${v("id")}" placeholder="evt_…" /></label>
    <label>account<input name="account" value="${v("account")}" placeholder="acct_… or platform" size="14" /></label>
    <label>payload contains<input name="text" value="${v("text")}" placeholder="cus_…" /></label>
    <button type="submit">Filter</button>
  </form>`;
}
