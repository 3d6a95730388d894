// Edge file: `webhook-inbox init [DIR]`: writes the scaffold (scaffold/app-files.ts) into an app's
// folder, adds its scripts to package.json and its lines to .gitignore. Never overwrites a file.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { appScaffold, SCAFFOLD_GITIGNORE, SCAFFOLD_SCRIPTS } from "../scaffold/app-files.ts";

/**
 * Runs `init` with its arguments (`[DIR]`, default the current folder) and returns the exit code: 0
 * written, 1 a scaffold file already exists (nothing written; the message names each), 2 usage.
 * package.json is created when absent (type module), else given the scaffold's scripts where it has
 * none of that name (npm init's placeholder `test` script counts as none); .gitignore gets
 * `node_modules/` and `.data/` where missing.
 */
export async function runInit(args: readonly string[]): Promise<number> {
  if (args.length > 1 || args[0]?.startsWith("-")) {
    if (args[0] === "--help" || args[0] === "-h") {
      console.log("Usage: webhook-inbox init [DIR]   scaffold an app in DIR (default: this folder); never overwrites a file");
      return 0;
    }
    console.error(`init takes at most one folder, got ${args.join(" ")}`);
    return 2;
  }
  const dir = resolve(args[0] ?? ".");
  const files = appScaffold();
  const taken = files.filter((f) => existsSync(join(dir, f.path))).map((f) => f.path);
  if (taken.length > 0) {
    console.error(`webhook-inbox init: ${taken.join(", ")} already exist in ${dir}; nothing written (init never overwrites)`);
    return 1;
  }
  for (const f of files) {
    mkdirSync(dirname(join(dir, f.path)), { recursive: true });
    writeFileSync(join(dir, f.path), f.text);
  }
  const pkgFile = join(dir, "package.json");
  const pkg = existsSync(pkgFile)
    ? (JSON.parse(readFileSync(pkgFile, "utf8")) as Record<string, unknown>)
    : { name: "webhook-app", private: true, type: "module" };
  const scripts = { ...(pkg.scripts as Record<string, string> | undefined) };
  // npm init's placeholder test script ("Error: no test specified", exit 1) is no test of the app's: the scaffold's replaces it.
  if (/^echo "Error: no test specified" && exit 1$/.test(scripts.test ?? "")) delete scripts.test;
  for (const [name, line] of Object.entries(SCAFFOLD_SCRIPTS)) scripts[name] ??= line;
  pkg.scripts = scripts;
  pkg.type ??= "module";
  writeFileSync(pkgFile, `${JSON.stringify(pkg, null, 2)}\n`);
  const ignoreFile = join(dir, ".gitignore");
  const ignored = existsSync(ignoreFile) ? readFileSync(ignoreFile, "utf8") : "";
  const missing = SCAFFOLD_GITIGNORE.split("\n").filter((line) => line && !ignored.split("\n").includes(line));
  if (missing.length) writeFileSync(ignoreFile, `${ignored}${ignored && !ignored.endsWith("\n") ? "\n" : ""}${missing.join("\n")}\n`);
  console.log(`webhook-inbox init: wrote ${files.map((f) => f.path).join(", ")} in ${dir}`);
  console.log("Next: bun test (the contract suite), then webhook-inbox serve and webhook-inbox deliver fixtures/customer.created.json");
  return 0;
}
