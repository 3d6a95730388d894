// Text from signed events (types, ids, error messages, payloads) on an operator's terminal.
//
// A sender can sign anything: an event type holding ESC sequences can rewrite the screen, and a
// bidirectional override (U+202E) can make `evt_abc` display as another id. Table output shows such
// characters as escapes; JSON output stays valid JSON that parses to the exact stored strings.

/** C0 and C1 controls and DEL, bidirectional marks, embeddings, overrides and isolates, line and paragraph separators, zero-width and invisible characters, BOM. */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/gu;
/** The same set less the C0 controls, which JSON.stringify already escapes. */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/gu;

const hex = (c: string, width: number): string => (c.codePointAt(0) ?? 0).toString(16).padStart(width, "0");

/**
 * `text` with every unsafe character (see UNSAFE) written as an escape: `\x1b` below U+0100,
 * `\u202e` above. Everything else, backslashes included, is unchanged, so ordinary text reads as
 * before; a literal `\x1b` typed by a sender therefore looks the same as an escaped ESC (harmless:
 * neither acts on the terminal).
 */
export function printable(text: string): string {
  return text.replace(UNSAFE, (c) => (c.length === 1 && c < "\u0100" ? `\\x${hex(c, 2)}` : `\\u${hex(c, 4)}`));
}

/**
 * `JSON.stringify(value, null, 2)` with DEL, C1 controls and the invisible and bidirectional
 * characters of UNSAFE also written as `\uXXXX` escapes (JSON.stringify escapes only C0 controls):
 * still valid JSON that parses to exactly the same value, and safe to print on a terminal.
 */
export function printableJson(value: unknown): string {
  return (JSON.stringify(value, null, 2) ?? "null").replace(UNSAFE_IN_JSON, (c) => `\\u${hex(c, 4)}`);
}

/** A table row with {@link printable} applied to every string cell. */
export function printableRow(row: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, typeof v === "string" ? printable(v) : v]));
}
