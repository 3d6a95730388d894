// Entry file: `bun run build` (and npm's `prepack`): the package as an app installs it, in dist/:
//  * JavaScript for Bun and Node.js 20+ (Bun.build, ESM, code shared between entries split into chunks
//    so the command and the app's configuration see one module state), with the patched postgres.js
//    bundled in (package managers apply patchedDependencies only to the root project, so an app's
//    install could not patch it), its types, license and the patch's provenance in dist/vendor/postgres;
//  * type declarations (tsc), their imports of postgres.js pointed at that vendored copy.
// Other dependencies stay dependencies. Exit 1 on a failed build.
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const DIST = join(ROOT, "dist");
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  version: string;
  dependencies: Record<string, string>;
  peerDependencies?: Record<string, string>;
  patchedDependencies: Record<string, string>;
};

/** Modules an app imports (package.json `exports` and `bin`). */
const ENTRIES = [
  "src/index.ts",
  "src/handlers/handler-table.ts",
  "src/runtime/migrations-fs.ts",
  "src/testing/contract-suite.ts",
  "src/bin/webhook-inbox.ts",
];

/** The Unlicense (https://unlicense.org), postgres.js's license per its package.json. */
const UNLICENSE = `This is free and unencumbered software released into the public domain.

Anyone is free to copy, modify, publish, use, compile, sell, or distribute this software, either in
source code form or as a compiled binary, for any purpose, commercial or non-commercial, and by any means.

In jurisdictions that recognize copyright laws, the author or authors of this software dedicate any and all
copyright interest in the software to the public domain. We make this dedication for the benefit of the public
at large and to the detriment of our heirs and successors. We intend this dedication to be an overt act of
relinquishment in perpetuity of all present and future rights to this software under copyright law.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO
THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE,
ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.

For more information, please refer to <https://unlicense.org>
`;

// Only what this build writes: dist/node (the Node adapter's own bundle, `bun run build:node`) is left alone.
for (const owned of ["chunks", "types", "vendor", "bin", "handlers", "runtime", "testing", "index.js"]) rmSync(join(DIST, owned), { recursive: true, force: true });
const external = [...Object.keys(pkg.dependencies), ...Object.keys(pkg.peerDependencies ?? {}), "bun:test", "bun"];
const built = await Bun.build({
  entrypoints: ENTRIES.map((e) => join(ROOT, e)),
  root: join(ROOT, "src"),
  outdir: DIST,
  target: "node",
  format: "esm",
  splitting: true,
  external,
  naming: { entry: "[dir]/[name].[ext]", chunk: "chunks/[name]-[hash].[ext]" },
});
if (!built.success) {
  for (const log of built.logs) console.error(log);
  process.exit(1);
}
const postgresVersion = JSON.parse(readFileSync(join(ROOT, "node_modules/postgres/package.json"), "utf8")).version as string;
const patchFile = pkg.patchedDependencies[`postgres@${postgresVersion}`];
if (!patchFile) throw new Error(`package.json patchedDependencies has no entry for postgres@${postgresVersion}`);
const bundled = readdirSync(join(DIST, "chunks")).some((f) => readFileSync(join(DIST, "chunks", f), "utf8").includes("COMMIT_ROLLED_BACK"));
if (!bundled) throw new Error("the bundle has no patched postgres.js (COMMIT_ROLLED_BACK not found): is node_modules/postgres patched?");

// The vendored postgres.js: its types (for the declarations below), the patch, where they came from.
const vendor = join(DIST, "vendor", "postgres");
mkdirSync(vendor, { recursive: true });
copyFileSync(join(ROOT, "node_modules/postgres/types/index.d.ts"), join(vendor, "index.d.ts"));
copyFileSync(join(ROOT, patchFile), join(vendor, `postgres@${postgresVersion}.patch`));
const patchSum = new Bun.CryptoHasher("sha256").update(readFileSync(join(ROOT, patchFile))).digest("hex");
writeFileSync(
  join(vendor, "README.md"),
  `# postgres.js ${postgresVersion}, bundled\n\n` +
    `webhook-inbox's JavaScript in dist/chunks bundles postgres.js ${postgresVersion} (https://github.com/porsager/postgres,\n` +
    `npm package \`postgres\`) with \`postgres@${postgresVersion}.patch\` applied (sha256 ${patchSum}), from the\n` +
    `repository's ${patchFile}; what each fix does and the tests that show it: patches/README.md in the repository.\n` +
    `An app needs no patch step: \`assertPatchedPostgres()\` checks the bundled copy at start.\n\n` +
    `index.d.ts is postgres.js's own types/index.d.ts, unchanged.\n\n` +
    `## License of postgres.js: the Unlicense\n\n${UNLICENSE}`,
);

// Declarations: tsc over the entries, into dist/types; relative imports end in .js, postgres.js's at the vendored types.
const tsconfig = join(DIST, "tsconfig.types.json");
writeFileSync(
  tsconfig,
  JSON.stringify({
    extends: "../tsconfig.json",
    compilerOptions: { noEmit: false, declaration: true, emitDeclarationOnly: true, outDir: "types", rootDir: "../src", paths: {} },
    include: ENTRIES.map((e) => `../${e}`),
  }),
);
const tsc = spawnSync(process.execPath, [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", tsconfig], { stdio: "inherit" });
rmSync(tsconfig);
if (tsc.status !== 0) process.exit(1);
for (const file of walk(join(DIST, "types"))) {
  const toVendor = relative(dirname(file), join(vendor, "index.js")).replace(/^(?!\.)/, "./");
  const text = readFileSync(file, "utf8")
    .replace(/(from\s+|import\()(["'])(\.{1,2}\/[^"']+)\.ts\2/g, "$1$2$3.js$2")
    .replace(/(from\s+|import\()(["'])postgres\2/g, `$1$2${toVendor}$2`);
  writeFileSync(file, text);
}
console.log(`Built dist/ (webhook-inbox ${pkg.version}): ${ENTRIES.length} entries, postgres.js ${postgresVersion} patched and bundled`);

function* walk(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* walk(path);
    else if (name.endsWith(".d.ts")) yield path;
  }
}

