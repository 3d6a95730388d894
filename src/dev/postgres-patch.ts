// Writes patches/postgres@3.4.9.patch from its one source, patches/postgres/edits.ts: the edits made in
// each of postgres.js's three builds, as the unified git diff bun applies (`patchedDependencies`).
// The pristine text comes from node_modules/postgres: as installed when it is unpatched, otherwise by
// undoing the committed patch; either way checked against postgres.js 3.4.9's git blob ids, so no
// network is needed.
import { createHash } from "node:crypto";
import { BUILDS, EDITS, PRISTINE_BLOBS, type PostgresEdit } from "../../patches/postgres/edits.ts";

/** Lines of context around each change, as `git diff` writes. */
const CONTEXT = 3;

/**
 * `text` with every edit of `edits` made; each `find` must occur exactly once in `text`.
 * @throws Error naming the edit and `where` when a `find` is missing or not unique.
 */
export function applyEdits(text: string, edits: readonly PostgresEdit[], where: string): string {
  for (const edit of edits) {
    const count = text.split(edit.find).length - 1;
    if (count !== 1) throw new Error(`Cannot apply edit "${edit.name}" to ${where}: its find text occurs ${count} times, not once`);
    text = text.replace(edit.find, () => edit.replace);
  }
  return text;
}

/** Git's object id of a file with contents `text` (sha1 of "blob <bytes>\0" and the bytes). */
export function gitBlobId(text: string): string {
  const bytes = Buffer.from(text, "utf8");
  return createHash("sha1").update(`blob ${bytes.length}\0`).update(bytes).digest("hex");
}

type Op = { kind: " " | "-" | "+"; line: string; old: number; new: number };

/** Line operations turning `a` into `b`: a longest common subsequence of the lines that differ. */
function lineOps(a: readonly string[], b: readonly string[]): Op[] {
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const n = a.length - head - tail;
  const m = b.length - head - tail;
  // lcs[i * (m + 1) + j]: common lines of a[head + i …] and b[head + j …] in the middle part.
  const lcs = new Uint32Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      lcs[i * (m + 1) + j] =
        a[head + i] === b[head + j]
          ? lcs[(i + 1) * (m + 1) + j + 1]! + 1
          : Math.max(lcs[(i + 1) * (m + 1) + j]!, lcs[i * (m + 1) + j + 1]!);
  const here = (x: number, y: number) => lcs[x * (m + 1) + y]!;
  const ops: Op[] = [];
  for (let k = 0; k < head; k++) ops.push({ kind: " ", line: a[k]!, old: k, new: k });
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[head + i] === b[head + j] && here(i, j) === here(i + 1, j + 1) + 1) {
      ops.push({ kind: " ", line: a[head + i]!, old: head + i, new: head + j });
      i++;
      j++;
    } else if (i < n && (j === m || here(i + 1, j) >= here(i, j + 1))) {
      ops.push({ kind: "-", line: a[head + i]!, old: head + i, new: head + j }); // removals first, as git shows them
      i++;
    } else {
      ops.push({ kind: "+", line: b[head + j]!, old: head + i, new: head + j });
      j++;
    }
  }
  for (let k = 0; k < tail; k++) ops.push({ kind: " ", line: a[head + n + k]!, old: head + n + k, new: head + m + k });
  return ops;
}

/** Git's hunk range: "start,count", the count left out when it is 1, the start one line earlier when it is 0. */
function range(start: number, count: number): string {
  return count === 1 ? `${start + 1}` : count === 0 ? `${start},0` : `${start + 1},${count}`;
}

/** Git's default hunk heading: the nearest line above `before` that starts with a letter, `_` or `$`, cut to 80 characters. */
function heading(lines: readonly string[], before: number): string {
  for (let k = before - 1; k >= 0; k--) {
    if (/^[A-Za-z_$]/.test(lines[k]!)) return ` ${lines[k]!.slice(0, 80).trimEnd()}`;
  }
  return "";
}

/** The lines of `text`, which must end with a newline (the patch has no "No newline at end of file" case). */
function linesOf(text: string, path: string): string[] {
  if (!text.endsWith("\n")) throw new Error(`Cannot diff ${path}: it does not end with a newline`);
  return text.slice(0, -1).split("\n");
}

/**
 * The unified git diff of one file from `before` to `after` (mode 100644, full blob ids, 3 lines of
 * context, git's hunk headings), or "" when they are equal.
 */
export function unifiedDiff(path: string, before: string, after: string): string {
  if (before === after) return "";
  const a = linesOf(before, path);
  const ops = lineOps(a, linesOf(after, path));
  const changed = ops.flatMap((op, k) => (op.kind === " " ? [] : [k]));
  const out = [
    `diff --git a/${path} b/${path}`,
    `index ${gitBlobId(before)}..${gitBlobId(after)} 100644`,
    `--- a/${path}`,
    `+++ b/${path}`,
  ];
  for (let c = 0; c < changed.length;) {
    let last = c;
    while (last + 1 < changed.length && changed[last + 1]! - changed[last]! <= 2 * CONTEXT + 1) last++;
    const from = Math.max(0, changed[c]! - CONTEXT);
    const to = Math.min(ops.length, changed[last]! + CONTEXT + 1);
    const hunk = ops.slice(from, to);
    const oldCount = hunk.filter((op) => op.kind !== "+").length;
    const newCount = hunk.filter((op) => op.kind !== "-").length;
    const first = hunk[0]!;
    out.push(`@@ -${range(first.old, oldCount)} +${range(first.new, newCount)} @@${heading(a, first.old)}`);
    for (const op of hunk) out.push(`${op.kind}${op.line}`);
    c = last + 1;
  }
  return `${out.join("\n")}\n`;
}

/**
 * `patched` with the hunks for `path` in `patch` undone, or undefined when `patch` has no diff of
 * `path`. @throws Error when a hunk does not match `patched` where it says.
 */
export function unapply(patch: string, path: string, patched: string): string | undefined {
  const section = patch.split(/^(?=diff --git )/m).find((s) => s.startsWith(`diff --git a/${path} b/${path}\n`));
  if (section === undefined) return undefined;
  const lines = linesOf(patched, path);
  const hunks = [...section.matchAll(/^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@.*\n((?:[ +-].*\n)*)/gm)];
  for (const hunk of hunks.reverse()) {
    const body = hunk[3]!.slice(0, -1).split("\n");
    const count = hunk[2] === undefined ? 1 : Number(hunk[2]);
    const start = count === 0 ? Number(hunk[1]) : Number(hunk[1]) - 1;
    const newLines = body.filter((l) => l[0] !== "-").map((l) => l.slice(1));
    const oldLines = body.filter((l) => l[0] !== "+").map((l) => l.slice(1));
    if (lines.slice(start, start + newLines.length).join("\n") !== newLines.join("\n"))
      throw new Error(`Cannot undo the patch in ${path}: a hunk at line ${start + 1} does not match`);
    lines.splice(start, newLines.length, ...oldLines);
  }
  return `${lines.join("\n")}\n`;
}

/** Reads a file of the installed package by its path inside the package ("cf/src/index.js"). */
export type ReadPackageFile = (path: string) => string;

/**
 * Postgres.js 3.4.9's own text of `path`: the installed file when it is pristine, else the installed
 * file with `committedPatch` undone. Checked against {@link PRISTINE_BLOBS}.
 * @throws Error saying to reinstall when neither gives the pristine file.
 */
export function pristineText(path: string, read: ReadPackageFile, committedPatch: string): string {
  const installed = read(path);
  const expected = PRISTINE_BLOBS[path];
  if (expected === undefined) throw new Error(`No pristine blob id for ${path} in patches/postgres/edits.ts`);
  if (gitBlobId(installed) === expected) return installed;
  let undone: string | undefined;
  try {
    undone = unapply(committedPatch, path, installed);
  } catch {
    undone = undefined;
  }
  if (undone !== undefined && gitBlobId(undone) === expected) return undone;
  throw new Error(
    `node_modules/postgres/${path} is neither postgres.js 3.4.9 nor that with the committed patch: ` +
      "run `rm -rf node_modules/postgres && bun install`, then try again",
  );
}

/** Each patched file of the package ("cf/src/connection.js", …) with the edits made in it, in path order. */
export function editedFiles(): { path: string; edits: PostgresEdit[] }[] {
  const files = [...new Set(EDITS.map((e) => e.file))];
  return BUILDS.flatMap((build) => files.map((file) => ({ path: build + file, edits: EDITS.filter((e) => e.file === file) }))).sort(
    (x, y) => (x.path < y.path ? -1 : x.path > y.path ? 1 : 0),
  );
}

/** The whole patch: every build's edited files, pristine → edited, in path order (as git orders them). */
export function postgresPatch(read: ReadPackageFile, committedPatch: string): string {
  return editedFiles()
    .map(({ path, edits }) => {
      const pristine = pristineText(path, read, committedPatch);
      return unifiedDiff(path, pristine, applyEdits(pristine, edits, path));
    })
    .join("");
}
