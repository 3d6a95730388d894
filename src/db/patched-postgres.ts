import postgres from "postgres";

/**
 * Text only patches/postgres@3.4.9.patch puts into postgres.js's `Postgres` function: the error code
 * its `sql.begin` throws when COMMIT's command tag is not COMMIT (patches/README.md, fix 1). It sits in
 * live code on purpose: Bun's Function.prototype.toString gives the source as Bun transpiled it, without
 * comments or dead code. The patch is applied whole, so its presence vouches for the patch's other fixes
 * (a connection that closes mid-transaction) too.
 */
const PATCH_MARKER = "COMMIT_ROLLED_BACK";

/** Factories already found patched: the check reads the function's source once. */
const patched = new WeakSet<object>();

/**
 * Throws unless `factory` (default: the postgres.js this package imports) carries
 * patches/postgres@3.4.9.patch, found by the marker text in its source (Function.prototype.toString,
 * ECMAScript: the source text of a function defined in source). Package managers apply
 * `patchedDependencies` only to the root project, so the built package (dist/, what an app installs)
 * bundles the patched copy (src/dev/bin/build-package.ts) and this always holds there; from source it
 * holds when the repository's `patchedDependencies` was applied. Without the patch a COMMIT that
 * PostgreSQL answered with ROLLBACK would be taken as saved. Called by connect(), createApp() and
 * runWorker(); costs one string search per process.
 * @throws Error naming the fix: the `patchedDependencies` entry, then reinstall.
 */
export function assertPatchedPostgres(factory: unknown = postgres): void {
  if (typeof factory === "function" && patched.has(factory)) return;
  if (typeof factory === "function" && Function.prototype.toString.call(factory).includes(PATCH_MARKER)) {
    patched.add(factory);
    return;
  }
  throw new Error(
    "webhook-inbox needs postgres.js 3.4.9 with patches/postgres@3.4.9.patch, and the postgres.js loaded here is unpatched. " +
      "The installed package (dist/) bundles the patched copy; this happens when webhook-inbox's source (src/) runs against a " +
      'node_modules/postgres that is not patched: in the repository, keep "patchedDependencies": { "postgres@3.4.9": "patches/postgres@3.4.9.patch" } ' +
      "in package.json and run `bun install` again. Without it a COMMIT that PostgreSQL answered with ROLLBACK is taken as saved.",
  );
}
