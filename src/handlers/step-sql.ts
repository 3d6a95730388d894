/**
 * What the statement-handler rules read from a step's SQL text, without a parser: the text with its
 * comments and literals blanked (PostgreSQL's lexical rules, "4.1 Lexical Structure"), and the
 * step's leading keyword. A step that cannot be classified is refused rather than guessed at, because
 * a write the rules do not see escapes the gate, the RETURNING rule and the two-writers rule.
 */

/** How one step's SQL begins: a read, a write of `table`, or text the rules refuse (`reason`). */
export type StepKind = { kind: "read" } | { kind: "write"; table: string } | { kind: "refused"; reason: string };

/**
 * `text` with every comment replaced by a space (`-- …` to end of line; `/* … *\/`, nested to any
 * depth, unterminated running to the end) and every string literal's content removed (`'…'` with `''`,
 * `E'…'` with backslash escapes, `$tag$…$tag$`), so keywords inside them are never read. Quoted
 * identifiers are kept as written. Never throws.
 */
export function sqlSkeleton(text: string): string {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const c = text[i] as string;
    const next = text[i + 1];
    if (c === "-" && next === "-") {
      const end = text.indexOf("\n", i);
      i = end === -1 ? text.length : end;
      out += " ";
    } else if (c === "/" && next === "*") {
      let depth = 1;
      i += 2;
      while (i < text.length && depth > 0) {
        if (text[i] === "/" && text[i + 1] === "*") (depth++, (i += 2));
        else if (text[i] === "*" && text[i + 1] === "/") (depth--, (i += 2));
        else i++;
      }
      out += " ";
    } else if (c === "'") {
      const escapes = /[eE]$/.test(out) && !/[a-zA-Z0-9_$][eE]$/.test(out);
      i++;
      while (i < text.length) {
        if (escapes && text[i] === "\\") i += 2;
        else if (text[i] === "'" && text[i + 1] === "'") i += 2;
        else if (text[i] === "'") break;
        else i++;
      }
      i++;
      out += "''";
    } else if (c === '"') {
      const end = text.indexOf('"', i + 1);
      let close = end;
      while (close !== -1 && text[close + 1] === '"') close = text.indexOf('"', close + 2);
      const stop = close === -1 ? text.length : close + 1;
      out += text.slice(i, stop);
      i = stop;
    } else if (c === "$" && !/[a-zA-Z0-9_$]$/.test(out)) {
      const tag = /^\$(?:[a-zA-Z_][a-zA-Z0-9_]*)?\$/.exec(text.slice(i))?.[0];
      if (tag === undefined) {
        out += c;
        i++;
        continue;
      }
      const end = text.indexOf(tag, i + tag.length);
      i = end === -1 ? text.length : end + tag.length;
      out += "''";
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** An identifier: unquoted (letters, digits, `_`, `$`) or double-quoted with `""` escapes. */
const NAME = String.raw`(?:"(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)`;

/** The write target after the leading keyword: `[only] name[.name[.name]]`, then a boundary. */
const TARGET = new RegExp(String.raw`^(?:only\s+)?(${NAME}(?:\s*\.\s*${NAME}){0,2})(?=[\s(*]|$)`, "i");

/** The keywords a write starts with, and what must follow before its target table. */
const WRITES: Record<string, RegExp> = {
  insert: /^insert\s+into\s+/i,
  update: /^update\s+/i,
  delete: /^delete\s+from\s+/i,
  merge: /^merge\s+into\s+/i,
};

/**
 * Classifies a step by its leading text `head` (a skeleton from {@link sqlSkeleton}, leading
 * whitespace and opening parentheses allowed): `select`/`values` read; `insert into`, `update`,
 * `delete from`, `merge into` write the table that follows (schema dropped, unquoted, unquoted names
 * lowercased as PostgreSQL folds them); anything else is refused: a step's own `with` (it could hide a
 * write; make each CTE its own step), a table name that is not written literally (a `${sql(name)}`
 * identifier), or any other first word.
 */
export function classifyHead(head: string): StepKind {
  const text = head.replace(/^[\s(]+/, "");
  const word = /^[a-z]+/i.exec(text)?.[0]?.toLowerCase() ?? "";
  if (word === "select" || word === "values") return { kind: "read" };
  const write = WRITES[word];
  if (write === undefined) {
    const shown = JSON.stringify(text.slice(0, 30));
    if (word === "with")
      return {
        kind: "refused",
        reason:
          "starts with its own WITH (a CTE inside it could write unseen); make each of its CTEs a step of its own and read it with step(name)",
      };
    return {
      kind: "refused",
      reason: `starts with ${shown}, not select, values, insert into, update, delete from or merge into (after comments)`,
    };
  }
  const afterKeyword = write.exec(text);
  const target = afterKeyword && TARGET.exec(text.slice(afterKeyword[0].length));
  if (!target?.[1])
    return {
      kind: "refused",
      reason: `is a ${word} whose table is not written literally after "${word}" (a table the rules cannot read cannot be checked)`,
    };
  const last = splitName(target[1]).pop() as string;
  return { kind: "write", table: last.startsWith('"') ? last.slice(1, -1).replaceAll('""', '"') : last.toLowerCase() };
}

/** The dot-separated parts of a possibly qualified name, whitespace trimmed, quotes kept. */
function splitName(name: string): string[] {
  return [...name.matchAll(new RegExp(NAME, "gi"))].map((m) => m[0]);
}
