// README.md and docs/ link to each other and to files of the repository: every relative link must
// lead to a file that exists and, with a #fragment, to a heading of that page (GitHub's anchors:
// lower case, punctuation dropped, spaces as hyphens).
import { expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";

const ROOT = join(import.meta.dir, "..");
const pages = ["README.md", ...readdirSync(join(ROOT, "docs"), { recursive: true }).map(String).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

/** GitHub's anchor of a heading's text. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");
}

/** The anchors of a Markdown file's headings (code blocks skipped). */
function anchors(file: string): Set<string> {
  const text = readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "");
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchor(m[1]!)));
}

test("every relative link of README.md and docs/*.md leads to an existing file and heading", () => {
  const broken: string[] = [];
  for (const page of pages) {
    const text = readFileSync(join(ROOT, page), "utf8").replace(/```[\s\S]*?```/g, "");
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const [path, fragment] = target!.split("#") as [string, string | undefined];
      const file = path === "" ? join(ROOT, page) : join(ROOT, dirname(page), path);
      if (!existsSync(file)) {
        broken.push(`${page}: ${target} (no such file)`);
        continue;
      }
      const md = statSync(file).isDirectory() ? join(file, "README.md") : file;
      if (fragment && (!md.endsWith(".md") || !existsSync(md) || !anchors(md).has(fragment)))
        broken.push(`${page}: ${target} (no heading #${fragment} in ${relative(ROOT, md)})`);
    }
  }
  expect(broken).toEqual([]);
});
