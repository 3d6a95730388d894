// Edge file: an older commit's code for `bun run bench --only layout`, run beside this tree's.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** An older commit's tree, extracted: its root, its short commit id, and how to remove it. */
export interface BeforeTree {
  dir: string;
  commit: string;
  remove(): void;
}

/**
 * Extracts the code of `ref` with `git archive` into a temporary directory, with a symlink to this
 * tree's node_modules (the same pinned, patched dependencies), so its own src/ and sql/ run as they were:
 * its `bun src/bin/serve.ts` migrates its database with its own migrations. `ref` undefined: the parent
 * of the commit that added `marker` (a path in this repository).
 * @throws Error when git fails, or when `ref` is undefined and no commit in this history adds `marker`
 *   (a shallow clone, an exported tree).
 */
export function extractBeforeTree(root: string, ref: string | undefined, marker: string): BeforeTree {
  const git = (...args: string[]) => {
    const out = spawnSync("git", ["-C", root, ...args], { encoding: "utf8", maxBuffer: 1 << 26 });
    if (out.status !== 0) throw new Error(`git ${args[0]} failed: ${out.stderr.trim()}`);
    return out.stdout.trim();
  };
  const added = ref === undefined ? git("log", "--diff-filter=A", "--format=%H", "--", marker).split("\n").pop() : undefined;
  if (ref === undefined && !added)
    throw new Error(`no commit adds ${marker} in this history (a shallow clone?): name the code before it with --before-ref REF`);
  const beforeRef = ref ?? `${added}^`;
  const commit = git("rev-parse", "--short", beforeRef);
  const dir = mkdtempSync(join(tmpdir(), "webhook-inbox-bench-before-"));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  const archive = spawnSync("sh", ["-c", 'git -C "$1" archive "$2" | tar -x -C "$3"', "sh", root, beforeRef, dir], { encoding: "utf8" });
  if (archive.status !== 0) {
    remove();
    throw new Error(`git archive ${beforeRef} failed: ${archive.stderr.trim()}`);
  }
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
  return { dir, commit, remove };
}
