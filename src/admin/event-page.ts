// One event: every row of it, what it changed, its payload on request, the actions on each row.
import type { Db } from "../db/db.ts";
import { printableJson } from "../ops/printable.ts";
import { eventEffects } from "../ops/effects.ts";
import { showEvent } from "../ops/events.ts";
import { html, type Html } from "./html.ts";
import { eventHref } from "./events-page.ts";

/** Hidden CSRF fields for one form (see `AdminAuth.issueCsrf`). */
export type CsrfFields = () => Promise<Html>;

/**
 * The event page's body, or null when no row has `eventId`: a table per row (endpoint, state,
 * attempts, times, last error, resolution note), the actions that row's state allows unless
 * `readonly` (requeue and resolve with a note for needs-review rows, replay for processed and ignored
 * ones), what the event changed (invoices, ledger entries, outbox messages: {@link eventEffects}; when
 * it changed none of these, one sentence per row saying why, from its state), and the payload only
 * when `withPayload` (a link asks for it).
 */
export async function eventBody(db: Db, eventId: string, withPayload: boolean, readonly: boolean, csrf: CsrfFields): Promise<Html | null> {
  const rows = await showEvent(db, eventId, withPayload);
  if (rows.length === 0) return null;
  const effects = await eventEffects(db, eventId);
  const href = eventHref(eventId);
  const sections: Html[] = [];
  for (const r of rows) {
    const key = html`<input type="hidden" name="provider" value="${r.provider}" /><input
        type="hidden"
        name="endpoint"
        value="${r.endpoint}"
      />`;
    const actions: Html[] = [];
    if (!readonly && r.state === "needs_review") {
      actions.push(
        html`<form class="inline" method="post" action="${href}/requeue">
          ${await csrf()}${key}<button type="submit">Requeue</button>
        </form>`,
      );
      actions.push(
        html`<form class="inline" method="post" action="${href}/resolve">
          ${await csrf()}${key}<input name="note" required placeholder="what was done (kept on the row)" size="40" /><button type="submit">
            Resolve
          </button>
        </form>`,
      );
    }
    if (!readonly && (r.state === "processed" || r.state === "ignored")) {
      actions.push(
        html`<form class="inline" method="post" action="${href}/replay">${await csrf()}${key}<button type="submit">Replay</button></form>`,
      );
    }
    sections.push(
      html`<section class="endpoint">
        <h2>${r.provider} / ${r.endpoint}: <span class="state">${r.state}</span></h2>
        <table>
          <tr>
            <th>type</th>
            <td class="event-type">${r.eventType}</td>
          </tr>
          <tr>
            <th>account</th>
            <td class="account">${r.account || "platform (no connected account)"}</td>
          </tr>
          <tr>
            <th>attempts</th>
            <td>${r.attempts}</td>
          </tr>
          <tr>
            <th>received</th>
            <td>${r.receivedAt}</td>
          </tr>
          <tr>
            <th>processed</th>
            <td>${r.processedAt ?? "–"}</td>
          </tr>
          <tr>
            <th>needs review since</th>
            <td>${r.needsReviewAt ?? "–"}</td>
          </tr>
          <tr>
            <th>last error</th>
            <td>${r.lastError ?? "–"}</td>
          </tr>
          <tr>
            <th>resolution note</th>
            <td>${r.resolutionNote ?? "–"}</td>
          </tr>
          <tr>
            <th>payload</th>
            <td>
              ${r.payloadDropped ? "dropped by retention" : withPayload ? "below" : html`<a href="${href}?payload=1">show payload</a>`}
            </td>
          </tr>
        </table>
        ${actions}
        ${withPayload && !r.payloadDropped ? html`<pre>${r.rawBody !== undefined ? r.rawBody : printableJson(r.payload)}</pre>` : false}
      </section>`,
    );
  }
  const nothing = effects.invoices.length === 0 && effects.ledgerEntries.length === 0 && effects.outbox.length === 0;
  if (nothing)
    return html`${sections}
      <h2>What it changed</h2>
      ${rows.map((r) => html`<p class="note">${nothingChanged(r.state, `${r.provider} / ${r.endpoint}`)}</p>`)}`;
  return html`${sections}
    <h2>What it changed</h2>
    ${table(
      "Invoices",
      ["id", "account", "customer", "status", "currency", "amount due", "amount paid", "updated"],
      effects.invoices.map((i) => [
        i.id,
        i.account || "platform",
        i.customerId,
        i.status,
        i.currency,
        i.amountDue,
        i.amountPaid,
        i.updatedAt,
      ]),
    )}
    ${table(
      "Ledger entries",
      ["id", "invoice", "kind", "amount", "currency", "booked"],
      effects.ledgerEntries.map((l) => [l.id, l.invoiceId, l.kind, l.amount, l.currency, l.bookedAt]),
    )}
    ${table(
      "Outbox messages",
      ["id", "aggregate", "type", "created", "published"],
      effects.outbox.map((o) => [o.id, `${o.aggregateType} ${o.aggregateId}`, o.eventType, o.createdAt, o.publishedAt ?? "pending"]),
    )}`;
}

/** Why a row of an event that changed no invoice, ledger entry or outbox message changed nothing, from its state. */
function nothingChanged(state: string, at: string): string {
  switch (state) {
    case "ignored":
      return `Nothing: this event was ignored at ${at} (no handler for its type).`;
    case "needs_review":
      return `Nothing: this event needs review at ${at}: it was refused or failed, and its changes were rolled back (see last error).`;
    case "unprocessed":
      return `Nothing yet: this event waits for a worker at ${at} (a failed attempt leaves nothing).`;
    case "resolved":
      return `Nothing: this event was resolved by hand at ${at} (see the resolution note); no handler's change was kept.`;
    case "processed":
      return `Nothing listed here: this event's handler ran at ${at} but booked no ledger entry, wrote no outbox message and names no invoice (a refund's or dispute's own rows are not listed).`;
    case "object_missing":
      return `Nothing: Stripe no longer has the object this event points to (at ${at}), so no handler ran.`;
    default:
      return `Nothing: this event was settled as ${state} at ${at} without running a handler.`;
  }
}

function table(title: string, head: readonly string[], rows: readonly (readonly string[])[]): Html {
  return html`<h3>${title}</h3>
    ${
      rows.length === 0
        ? html`<p class="note">none</p>`
        : html`<table>
            <tr>
              ${head.map((h) => html`<th>${h}</th>`)}
            </tr>
            ${rows.map(
              (r) =>
                html`<tr>
                  ${r.map((c) => html`<td>${c}</td>`)}
                </tr>`,
            )}
          </table>`
    }`;
}
