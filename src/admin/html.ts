// HTML built by one tagged template that escapes every value it did not build itself: text from
// signed events (types, ids, errors, payloads) can hold markup, and a compromised signing secret
// would otherwise turn it into script on an operator's page.
import { printable } from "../ops/printable.ts";

/** Markup the {@link html} template made (or {@link trusted} vouched for): inserted as it is. */
export class Html {
  constructor(readonly markup: string) {}
  toString(): string {
    return this.markup;
  }
}

const ENTITIES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "`": "&#96;" };

/**
 * `value` as text that HTML shows literally, in element content and in quoted attribute values:
 * `& < > " ' \`` become entities, and control, bidirectional and invisible characters are shown as
 * escapes (`\x1b`, `\u202e`) as on the terminal ({@link printable}), so an id cannot pose as another.
 * null and undefined are the empty string; anything else goes through `String()` first.
 */
export function escapeHtml(value: unknown): string {
  if (value === null || value === undefined) return "";
  return printable(String(value)).replace(/[&<>"'`]/g, (c) => ENTITIES[c] ?? c);
}

/** Markup from this module's own code, never from a request or a row. */
export function trusted(markup: string): Html {
  return new Html(markup);
}

/**
 * The template tag of every admin page: `html\`<td>${row.eventType}</td>\`` escapes the value with
 * {@link escapeHtml}; an {@link Html} value (a nested `html` result) is inserted as it is, an array
 * is each of its items in turn, and `false`, null and undefined insert nothing.
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0] ?? "";
  values.forEach((value, i) => {
    out += piece(value) + (strings[i + 1] ?? "");
  });
  return new Html(out);
}

function piece(value: unknown): string {
  if (value instanceof Html) return value.markup;
  if (Array.isArray(value)) return value.map(piece).join("");
  if (value === false || value === null || value === undefined) return "";
  return escapeHtml(value);
}
