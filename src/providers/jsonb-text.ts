/** A JSON text made storable as PostgreSQL jsonb, and what was replaced to get there. */
export interface JsonbCopy {
  /** The same JSON with every refused escape replaced by `\ufffd` (U+FFFD); otherwise byte for byte the input. */
  json: string;
  /** What was replaced, for the inbox's `payload_sanitized` column and operators, e.g. `\u0000 ×2 → U+FFFD`. */
  replaced: string;
}

// At each backslash, in this order: a valid surrogate pair (kept), a \u0000 or a lone surrogate
// escape (replaced), any other escape (kept, consumed whole so `\\u0000`, an escaped backslash followed
// by "u0000", is never mistaken for one). Backslashes occur only inside strings in valid JSON.
const ESCAPES = /\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})|\\[^]/g;

/**
 * Returns a copy of `json` (text that `JSON.parse` accepts) that PostgreSQL's jsonb input can take,
 * or undefined when `json` needs no change (the common case, found without a regex when it has no
 * `\u` escape at all). PostgreSQL 18 refuses, in strings and keys alike, the escape `\u0000`
 * (SQLSTATE 22P05, "\u0000 cannot be converted to text") and a UTF-16 surrogate escape not part of
 * a high-low pair (22P02); both are replaced by `\ufffd`, the Unicode replacement character, so the
 * text stays valid JSON and keeps every other byte, numbers included. What cannot be fixed this way
 * is left alone and still refused: a number beyond numeric's range (22003), nesting too deep
 * (54001). A raw U+0000 or lone surrogate cannot occur: JSON forbids raw control characters and a
 * UTF-8 body cannot encode a surrogate. PostgreSQL manual, "JSON Types" (§8.14).
 */
export function jsonbCopy(json: string): JsonbCopy | undefined {
  if (!json.includes("\\u")) return undefined;
  let nul = 0;
  let lone = 0;
  const copy = json.replace(ESCAPES, (escape: string, bad: string | undefined) => {
    if (bad === undefined) return escape;
    if (bad === "0000") nul++;
    else lone++;
    return "\\ufffd";
  });
  if (nul === 0 && lone === 0) return undefined;
  const parts = [nul > 0 ? `\\u0000 ×${nul}` : "", lone > 0 ? `lone surrogate ×${lone}` : ""].filter(Boolean);
  return { json: copy, replaced: `${parts.join(", ")} → U+FFFD` };
}
