// Entry file: `bun run migrate`: applies pending sql/ migrations to DATABASE_URL (or the embedded server).
// Exit codes: 0 ok, 1 failure, 2 usage error.
import { cannotConnectMessage, isConnectFailure } from "../db/connect-failure.ts";
import { migrate } from "../db/migrate.ts";
import { openCommandDatabase } from "../runtime/refuse-hidden-pooler.ts";
import { loadAppMigrations, loadMigrations } from "../runtime/migrations-fs.ts";
import { takeNoArguments } from "../runtime/command-args.ts";

const USAGE = `Usage: bun run migrate
  applies the pending migrations to DATABASE_URL (or the embedded server): the package's sql/,
  then the app's own folder when its configuration names one; takes no arguments`;

takeNoArguments("migrate", USAGE, process.argv.slice(2));

const { db } = await openCommandDatabase(process.env, "webhook-inbox migrate", 1);
try {
  const applied = await migrate(db, loadMigrations(), loadAppMigrations());
  console.log(applied.length ? `Applied ${applied.join(", ")}` : "Nothing to apply: the schema is current");
} catch (err) {
  console.error(isConnectFailure(err) ? cannotConnectMessage(err) : err instanceof Error ? err.message : err);
  process.exitCode = 1;
} finally {
  await db.end({ timeout: 5 });
}
