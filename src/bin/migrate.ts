// Entry file: `bun run migrate`: applies pending sql/ migrations to DATABASE_URL (or the embedded server).
import { connect } from "../db/db.ts";
import { migrate } from "../db/migrate.ts";
import { openDatabase, poolerFromEnv } from "../runtime/database.ts";
import { refuseHiddenPooler } from "../runtime/refuse-hidden-pooler.ts";
import { loadMigrations } from "../runtime/migrations-fs.ts";

const database = await openDatabase(process.env).catch((err: unknown) => {
  console.error(`Cannot open the database: ${err instanceof Error ? err.message : String(err)}`); // never quotes DATABASE_URL
  process.exit(1);
});
await refuseHiddenPooler(database, poolerFromEnv(process.env));
const db = connect(database.url, { max: 1, applicationName: "webhook-inbox migrate", pooler: poolerFromEnv(process.env) });
try {
  const applied = await migrate(db, loadMigrations());
  console.log(applied.length ? `Applied ${applied.join(", ")}` : "Nothing to apply: the schema is current");
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
} finally {
  await db.end({ timeout: 5 });
  await database.close();
}
