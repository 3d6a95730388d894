// Which folders of src/ may import which: the layout's dependency direction, held by a test instead of
// by memory. Every .ts file under src/ is scanned for its import specifiers (static `import … from`,
// `export … from`, side-effect `import "…"`, dynamic `import("…")`) and the globals it touches.
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, posix, relative } from "node:path";

const ROOT = join(import.meta.dir, "..");

/** Everything the production wiring may use: every folder below the entry points. */
const BELOW_ENTRIES = [
  "admin",
  "reconcile",
  "receiver",
  "worker",
  "outbox",
  "ops",
  "writeback",
  "handlers",
  "providers",
  "stripe-api",
  "inbox",
  "loop",
  "db",
  "config",
  "errors",
  "log",
  "telemetry",
  "retry",
  "app-config",
  "version",
] as const;

/**
 * Folder (or root leaf module) of src/ → the folders and leaves it may import, besides itself.
 * Top to bottom: entry points (bin, adapter) → production wiring (runtime) → the operator's page
 * (admin) → the receiver and the loops and operator functions (receiver, worker, outbox, ops, writeback) → what they build on
 * (handlers, providers, inbox, loop) → PostgreSQL plumbing (db) → shared leaves (config, errors, log).
 * dev (bench, chaos, the delivery tool) may import anything and nothing may import it.
 */
export const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  // The webhook-inbox command picks the Node.js adapter's entry under Node.js and writes the init scaffold.
  bin: ["runtime", "adapter", "scaffold", ...BELOW_ENTRIES],
  adapter: ["runtime", ...BELOW_ENTRIES],
  runtime: BELOW_ENTRIES,
  // The package's importable core (package.json `exports` "."): Web APIs only, like the receiver.
  index: ["receiver", "worker", "handlers", "providers", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry", "app-config", "version"],
  // An app's configuration (webhook-inbox.config.ts): types and checks over handler tables and the providers they are for.
  "app-config": ["handlers", "providers", "inbox", "errors"],
  // The package version, a leaf; the files `webhook-inbox init` writes, text only.
  version: [],
  scaffold: [],
  // The contract suite an app runs (webhook-inbox/testing): bun:test over the production wiring.
  testing: ["runtime", ...BELOW_ENTRIES],
  // The operator's page: the operator functions rendered as HTML; only the wiring (runtime) mounts it.
  admin: ["ops", "handlers", "providers", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry"],
  receiver: ["handlers", "providers", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry"],
  worker: ["handlers", "providers", "stripe-api", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry"],
  outbox: ["handlers", "providers", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry"],
  // Backfill and reconciliation: Stripe's API through the same handlers and inbox as a webhook.
  reconcile: ["receiver", "worker", "handlers", "providers", "stripe-api", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry"],
  ops: ["handlers", "providers", "stripe-api", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry"],
  writeback: ["handlers", "providers", "inbox", "loop", "db", "config", "errors", "log", "telemetry", "retry"],
  // Handlers write through the inbox's contract (inbox/apply-event.ts defines what a handler is) and read provider constants.
  handlers: ["inbox", "providers", "db", "config", "errors", "log", "telemetry", "retry"],
  providers: ["db", "config", "errors", "log"],
  // The Stripe API client (backfill, reconciliation, thin-event fetches): settings and retries only.
  "stripe-api": ["config", "errors", "log", "telemetry", "retry"],
  // The inbox stores verified events, whose shape the provider interface defines, and applies them in one transaction.
  inbox: ["providers", "db", "config", "errors", "log", "telemetry", "retry"],
  // The loops' retry backoff is the inbox's Backoff shape.
  loop: ["inbox", "db", "config", "errors", "log", "telemetry"],
  db: ["errors", "log"],
  // The configuration validates database URLs and names the pooler modes of db/.
  config: ["db", "errors", "log"],
  errors: [],
  log: [],
  // OpenTelemetry as the core uses it (the API module is passed in by the entry files): a shared leaf.
  telemetry: [],
  // The one retry loop (transactions PostgreSQL rolled back for a conflict, Stripe API calls).
  retry: [],
  dev: ["*"],
};

/** Folders whose files run only on a server runtime and so may use node:/bun: modules and Bun/process/Deno globals. */
export const EDGE = new Set(["bin", "adapter", "runtime", "dev", "testing"]);

/**
 * Imports of src/dev/ from outside it, each allowed for its reason (as "importer → imported"): the
 * `webhook-inbox deliver` command is the development delivery tool, loaded only when that command runs.
 */
export const DEV_IMPORTS = new Set(["src/bin/webhook-inbox.ts → src/dev/bin/deliver.ts"]);

/** One import of a scanned file: its specifier and, for a relative one, the repository path it names. */
export interface Import {
  specifier: string;
  /** Repository-relative path (posix) of a relative import; undefined for packages and node:/bun: modules. */
  target?: string;
}

/** A scanned source file: repository-relative path (posix), its imports, and the globals it touches. */
export interface SourceFile {
  path: string;
  imports: readonly Import[];
  /** Server-runtime globals used (`Bun`, `process`, `Deno`), comments excluded. */
  globals: readonly string[];
}

/** "src/receiver/app.ts" → "receiver"; "src/config.ts" → "config"; undefined outside src/. */
export function layerOf(path: string): string | undefined {
  const parts = path.split("/");
  if (parts[0] !== "src" || parts.length < 2) return undefined;
  return parts.length === 2 ? parts[1]!.replace(/\.ts$/, "") : parts[1];
}

/** Source text without `//` line comments and block comments, so a path or `process.env` in prose is no use. */
function withoutComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

/** Imports and globals of the file at repository path `path` with contents `text`. */
export function scan(path: string, text: string): SourceFile {
  const code = withoutComments(text);
  const imports: Import[] = [];
  const pattern = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(["'`])([^"'`]+)\1/g;
  for (const m of code.matchAll(pattern)) {
    const specifier = m[2]!;
    imports.push(
      specifier.startsWith(".") ? { specifier, target: posix.normalize(posix.join(posix.dirname(path), specifier)) } : { specifier },
    );
  }
  const globals = [...new Set([...code.matchAll(/(?<![\w.$])(Bun|process|Deno)\s*(?:\.|\[)/g)].map((m) => m[1]!))];
  return { path, imports, globals };
}

/**
 * Every rule broken by `files`, one line each as "file → imported file: rule" (a global reads
 * "file → Bun: rule"). Empty when the graph is clean.
 */
export function violations(files: readonly SourceFile[], allowed = ALLOWED, edge = EDGE): string[] {
  const found: string[] = [];
  for (const file of files) {
    const from = layerOf(file.path);
    if (from === undefined) continue;
    const rule = allowed[from];
    if (rule === undefined) {
      found.push(`${file.path} → (any): src/${from} has no entry in the allowed-dependency table`);
      continue;
    }
    for (const imp of file.imports) {
      if (imp.target === undefined) {
        if (!edge.has(from) && /^(node:|bun:|bun$)/.test(imp.specifier)) {
          found.push(
            `${file.path} → ${imp.specifier}: src/${from} uses Web APIs only; node: and bun: modules belong in bin/, adapter/, runtime/ or dev/`,
          );
        }
        continue;
      }
      const to = layerOf(imp.target);
      if (to === undefined || to === from) continue;
      if (DEV_IMPORTS.has(`${file.path} → ${imp.target}`)) continue;
      if (to === "dev" && from !== "dev") {
        found.push(`${file.path} → ${imp.target}: nothing outside src/dev/ imports src/dev/`);
      } else if (!rule.includes("*") && !rule.includes(to)) {
        found.push(`${file.path} → ${imp.target}: src/${from} may import only ${rule.length ? rule.join(", ") : "nothing else of src/"}`);
      }
    }
    if (!edge.has(from)) {
      for (const g of file.globals) {
        found.push(`${file.path} → ${g}: src/${from} uses Web APIs only; ${g} globals belong in bin/, adapter/, runtime/ or dev/`);
      }
    }
  }
  return found;
}

/** Every .ts file under `dir` (repository-relative, posix), recursively. */
function tsFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)).split("\\").join("/"));
}

test("`violations()` finds no wrong-way import and no server-runtime API in the Web-standard core of src/", () => {
  const files = tsFiles("src").map((path) => scan(path, readFileSync(join(ROOT, path), "utf8")));
  expect(files.length).toBeGreaterThan(50);
  expect(files.some((f) => f.imports.some((i) => i.target !== undefined))).toBe(true);
  expect(violations(files).join("\n")).toBe("");
});

test("`layerOf()` names every folder of src/ that holds a file, and each has a row in the table", () => {
  const layers = new Set(tsFiles("src").map(layerOf));
  for (const layer of layers) expect(ALLOWED[layer!], `src/${layer}`).toBeDefined();
  expect(layerOf("src/receiver/app.ts")).toBe("receiver");
  expect(layerOf("src/config.ts")).toBe("config");
  expect(layerOf("src/dev/bench/payload.ts")).toBe("dev");
  expect(layerOf("test/helpers.ts")).toBeUndefined();
});

test("`violations()` reports each kind of broken rule as file → imported file: rule", () => {
  const files = [
    scan("src/worker/worker.ts", `import { describeError } from "../receiver/receive.ts";\nimport type { X } from "../db/db.ts";`),
    scan("src/receiver/app.ts", `export { deliver } from "../dev/deliver.ts";`),
    scan("src/db/db.ts", `const m = await import("../handlers/handler-table.ts");`),
    scan(
      "src/providers/stripe.ts",
      `import { createHmac } from "node:crypto";\nimport "bun:sqlite";\n// process.env in a comment is fine\nconst port = process.env.PORT;\nBun.serve({});`,
    ),
    scan("src/errors.ts", `import type { LogFn } from "./log.ts";`),
    scan("src/newfolder/thing.ts", `import { x } from "../db/db.ts";`),
    scan(
      "src/runtime/signals.ts",
      `import { on } from "node:events";\nprocess.on("SIGTERM", () => {});\nimport { serve } from "../bin/serve.ts";`,
    ),
    scan("src/receiver/probes.ts", `import { createAdmin } from "../admin/admin.ts";`),
    scan("src/admin/admin.ts", `import { createApp } from "../receiver/app.ts";\nconst s = Bun.file("x");`),
  ];
  expect(violations(files)).toEqual([
    "src/worker/worker.ts → src/receiver/receive.ts: src/worker may import only handlers, providers, stripe-api, inbox, loop, db, config, errors, log, telemetry, retry",
    "src/receiver/app.ts → src/dev/deliver.ts: nothing outside src/dev/ imports src/dev/",
    "src/db/db.ts → src/handlers/handler-table.ts: src/db may import only errors, log",
    "src/providers/stripe.ts → node:crypto: src/providers uses Web APIs only; node: and bun: modules belong in bin/, adapter/, runtime/ or dev/",
    "src/providers/stripe.ts → bun:sqlite: src/providers uses Web APIs only; node: and bun: modules belong in bin/, adapter/, runtime/ or dev/",
    "src/providers/stripe.ts → process: src/providers uses Web APIs only; process globals belong in bin/, adapter/, runtime/ or dev/",
    "src/providers/stripe.ts → Bun: src/providers uses Web APIs only; Bun globals belong in bin/, adapter/, runtime/ or dev/",
    "src/errors.ts → src/log.ts: src/errors may import only nothing else of src/",
    "src/newfolder/thing.ts → (any): src/newfolder has no entry in the allowed-dependency table",
    "src/runtime/signals.ts → src/bin/serve.ts: src/runtime may import only admin, reconcile, receiver, worker, outbox, ops, writeback, handlers, providers, stripe-api, inbox, loop, db, config, errors, log, telemetry, retry, app-config, version",
    "src/receiver/probes.ts → src/admin/admin.ts: src/receiver may import only handlers, providers, inbox, loop, db, config, errors, log, telemetry, retry",
    "src/admin/admin.ts → src/receiver/app.ts: src/admin may import only ops, handlers, providers, inbox, loop, db, config, errors, log, telemetry, retry",
    "src/admin/admin.ts → Bun: src/admin uses Web APIs only; Bun globals belong in bin/, adapter/, runtime/ or dev/",
  ]);
});

test("`violations()` lets dev/ import anything, and same-folder and downward imports pass", () => {
  const files = [
    scan(
      "src/dev/bin/chaos.ts",
      `import { runWorker } from "../../worker/worker.ts";\nimport { x } from "../random.ts";\nimport { spawn } from "node:child_process";\nprocess.exit(0);`,
    ),
    scan("src/bin/serve.ts", `import { startReceiver } from "../runtime/receiver.ts";`),
    scan(
      "src/receiver/app.ts",
      `import { readBody } from "./request-body.ts";\nimport { AppError } from "../errors.ts";\nimport { Router } from "itty-router";`,
    ),
  ];
  expect(violations(files)).toEqual([]);
});
