// Entry file: `bun run patch:postgres [--check]`: writes patches/postgres@3.4.9.patch from
// patches/postgres/edits.ts for postgres.js's three builds (cf/src, cjs/src, src). With --check it
// writes nothing and exits 1 when the committed patch differs from what it would write.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { BUILDS, EDITS, PACKAGE } from "../../../patches/postgres/edits.ts";
import { postgresPatch } from "../postgres-patch.ts";

const ROOT = join(import.meta.dir, "..", "..", "..");
const PATCH = join(ROOT, "patches", `${PACKAGE}.patch`);
const INSTALLED = join(ROOT, "node_modules", "postgres");

const { values } = parseArgs({ options: { check: { type: "boolean", default: false } } });
const committed = readFileSync(PATCH, "utf8");
let patch: string;
try {
  patch = postgresPatch((path) => readFileSync(join(INSTALLED, path), "utf8"), committed);
} catch (err) {
  console.error(`Cannot write patches/${PACKAGE}.patch: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
}
const lines = patch.split("\n").length - 1;
if (values.check) {
  if (patch !== committed) {
    console.error(`patches/${PACKAGE}.patch differs from patches/postgres/edits.ts: run \`bun run patch:postgres\` and \`bun install\``);
    process.exit(1);
  }
  console.log(`patches/${PACKAGE}.patch matches patches/postgres/edits.ts (${lines} lines)`);
} else {
  writeFileSync(PATCH, patch);
  console.log(
    `Wrote patches/${PACKAGE}.patch: ${EDITS.length} edits in ${BUILDS.length} builds, ${lines} lines` +
      (patch === committed ? " (unchanged)" : "; run `bun install` to apply it"),
  );
}
