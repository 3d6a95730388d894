import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BUILDS, EDITS, PACKAGE } from "../../patches/postgres/edits.ts";
import { applyEdits, editedFiles, gitBlobId, postgresPatch, pristineText, unapply, unifiedDiff } from "../../src/dev/postgres-patch.ts";

const ROOT = join(import.meta.dir, "..", "..");
const committed = readFileSync(join(ROOT, "patches", `${PACKAGE}.patch`), "utf8");
const installed = (path: string) => readFileSync(join(ROOT, "node_modules", "postgres", path), "utf8");

test("`postgresPatch()` writes exactly the committed patches/postgres@3.4.9.patch (run `bun run patch:postgres` after changing edits.ts)", () => {
  expect(postgresPatch(installed, committed)).toBe(committed);
});

test("every build in node_modules/postgres carries every edit of patches/postgres/edits.ts, and no other change", () => {
  const files = editedFiles();
  expect(files.map((f) => f.path)).toEqual(BUILDS.flatMap((b) => [`${b}src/connection.js`, `${b}src/index.js`]).sort());
  for (const { path, edits } of files) {
    const text = installed(path);
    const missing = edits.filter((edit) => !text.includes(edit.replace)).map((edit) => edit.name);
    expect(missing, `edits missing from node_modules/postgres/${path} (run bun install)`).toEqual([]);
    expect(text).toBe(applyEdits(pristineText(path, installed, committed), edits, path));
  }
  expect(EDITS.every((edit) => edit.find !== edit.replace && edit.why.length > 0)).toBe(true);
});

test("`applyEdits()` refuses an edit whose find text is missing or occurs twice", () => {
  const edit = { name: "x", file: "src/index.js" as const, find: "a\n", replace: "b\n", why: "test" };
  expect(applyEdits("a\nc\n", [edit], "f")).toBe("b\nc\n");
  expect(() => applyEdits("c\n", [edit], "f")).toThrow('Cannot apply edit "x" to f: its find text occurs 0 times, not once');
  expect(() => applyEdits("a\na\n", [edit], "f")).toThrow("occurs 2 times");
});

test("`gitBlobId()` is git's object id", () => {
  expect(gitBlobId("")).toBe("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  expect(gitBlobId("hello\n")).toBe("ce013625030ba8dba906f756967f9e9ca394464a");
});

test("`unifiedDiff()` writes git's hunks (3 lines of context, near changes merged, headings, a count of 1 left out) and `unapply()` undoes them", () => {
  const before = Array.from({ length: 20 }, (_, i) => `line ${i + 1}\n`).join("");
  const after = before.replace("line 2\n", "line 2\nadded\n").replace("line 8\n", "").replace("line 19\n", "changed 19\n");
  const diff = unifiedDiff("f.txt", before, after);
  expect(diff).toBe(
    [
      "diff --git a/f.txt b/f.txt",
      `index ${gitBlobId(before)}..${gitBlobId(after)} 100644`,
      "--- a/f.txt",
      "+++ b/f.txt",
      "@@ -1,11 +1,11 @@",
      ...[
        " line 1",
        " line 2",
        "+added",
        " line 3",
        " line 4",
        " line 5",
        " line 6",
        " line 7",
        "-line 8",
        " line 9",
        " line 10",
        " line 11",
      ],
      "@@ -16,5 +16,5 @@ line 15",
      ...[" line 16", " line 17", " line 18", "-line 19", "+changed 19", " line 20"],
      "",
    ].join("\n"),
  );
  expect(unapply(diff, "f.txt", after)).toBe(before);
  expect(unapply(diff, "g.txt", after)).toBeUndefined();
  expect(unifiedDiff("f.txt", "a\n", "b\n").split("\n")[4]).toBe("@@ -1 +1 @@");
  expect(unifiedDiff("f.txt", before, before)).toBe("");
});
