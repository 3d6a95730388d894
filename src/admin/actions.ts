// The actions on one inbox row: the operator functions of `bun run inbox`, one row at a time.
import type { Db } from "../db/db.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { replayEvent } from "../ops/replay.ts";
import { ReplayRefused } from "../inbox/apply-event.ts";
import { EndpointPaused } from "../inbox/pauses.ts";
import { requeue } from "../ops/requeue.ts";
import { resolveReviewed } from "../ops/resolve.ts";
import { html, type Html } from "./html.ts";
import { eventHref } from "./events-page.ts";

/** A row action's answer: a message for the page and its HTTP status (200 done, 409 nothing to do, 400 bad input). */
export interface ActionResult {
  status: number;
  body: Html;
}

/** Which row action a POST names. */
export type RowAction = "requeue" | "resolve" | "replay";

/**
 * Runs `action` on the row (`provider`, `endpoint`, `eventId`): `requeue` and `resolve` (with
 * `note`) through {@link requeue} and {@link resolveReviewed} narrowed to that one row (they touch
 * only needs-review rows), `replay` through {@link replayEvent} with the endpoint's handlers.
 * The form fields each action takes (`POST /admin/events/<eventId>/<action>`, the event id in the
 * path): `provider` and `endpoint`, the row's key, for all three; `note` (what was done, kept on the
 * row) for `resolve` only. A missing or blank one is answered 400 naming every such field, before
 * anything is read or written (a blank key would otherwise narrow nothing: `whereRows` skips empty
 * values). Expected refusals (the row is not in a state for it, a replay the row's state
 * forbids) are answered 409 with the reason; nothing else is caught.
 */
export async function runRowAction(
  db: Db,
  action: RowAction,
  row: { provider: string; endpoint: string; eventId: string },
  note: string,
  handlersFor: (provider: string, endpoint: string) => HandlerTable | undefined,
): Promise<ActionResult> {
  const back = html`<p><a href="${eventHref(row.eventId)}">Back to ${row.eventId}</a></p>`;
  const only = { provider: row.provider, endpoint: row.endpoint, eventId: row.eventId };
  const missing = missingFields(action, row, note);
  if (missing.length > 0)
    return {
      status: 400,
      body: html`<p class="error">Cannot ${action} ${row.eventId}: missing form field(s) ${missing.join(", ")}.</p>
        ${back}`,
    };
  switch (action) {
    case "requeue": {
      const result = await requeue(db, only, false);
      return result.rows.length === 1
        ? {
            status: 200,
            body: html`<p class="ok">Requeued ${row.eventId} at ${row.endpoint}: attempts reset, workers woken.</p>
              ${back}`,
          }
        : {
            status: 409,
            body: html`<p class="error">Nothing requeued: ${row.eventId} at ${row.endpoint} is not needs-review.</p>
              ${back}`,
          };
    }
    case "resolve": {
      const result = await resolveReviewed(db, only, note, false);
      return result.rows.length === 1
        ? {
            status: 200,
            body: html`<p class="ok">Resolved ${row.eventId} at ${row.endpoint} with the note “${note.trim()}”.</p>
              ${back}`,
          }
        : {
            status: 409,
            body: html`<p class="error">Nothing resolved: ${row.eventId} at ${row.endpoint} is not needs-review.</p>
              ${back}`,
          };
    }
    case "replay": {
      try {
        const r = await replayEvent(db, only, handlersFor(row.provider, row.endpoint));
        return {
          status: 200,
          body: html`<p class="ok">
              Replayed ${row.eventId} (${r.eventType}) at ${row.endpoint}:
              ${r.handled ? `${r.inserted} inserted, ${r.updated} updated, ${r.deleted} deleted` : "no handler for this type, nothing ran"}.
            </p>
            ${back}`,
        };
      } catch (err) {
        // Refused as the row is now (not settled, resolved, its payload gone…), or its endpoint is paused: 409 with why.
        if (err instanceof ReplayRefused || err instanceof EndpointPaused)
          return {
            status: 409,
            body: html`<p class="error">${err.message}</p>
              ${back}`,
          };
        throw err;
      }
    }
  }
}

/** The form fields `action` needs that are missing or blank, in form order: provider, endpoint, then note for resolve. */
function missingFields(action: RowAction, row: { provider: string; endpoint: string }, note: string): string[] {
  const fields: [string, string][] = [
    ["provider", row.provider],
    ["endpoint", row.endpoint],
  ];
  if (action === "resolve") fields.push(["note", note]);
  return fields
    .filter(([, value]) => value.trim() === "")
    .map(([name]) => (name === "note" ? "note (say what was done about the event)" : name));
}
