// Edge file: the start-up refusal of a command whose DATABASE_URL leads to an undeclared transaction pooler.
import type { DatabaseTls, Db, Pooler } from "../db/db.ts";
import { connectDatabase, databaseTls } from "./database-tls.ts";
import { CannotConnectError } from "../db/connect-failure.ts";
import { hiddenPoolerProblem } from "../db/pooler-check.ts";
import { openDatabase, poolerFromEnv, type DatabaseHandle } from "./database.ts";

/**
 * Checks `database.url` for a transaction pooler when `pooler` (DATABASE_POOLER) is not `transaction`
 * (see hiddenPoolerProblem); on one, prints one line naming DATABASE_POOLER to stderr and exits 1.
 * The embedded PostgreSQL (`embedded: true`) is ours and direct, so it is not checked. When the check cannot
 * connect (wrong password, no such database, unknown host, unknown URL parameter), it prints
 * `Cannot connect to the database: <reason>`; when the check itself fails, that is printed: either way
 * without the URL, and it exits 1. An unreachable database is left to the command's own connection.
 */
export async function refuseHiddenPooler(database: { url: string; embedded?: boolean }, pooler: Pooler): Promise<void> {
  if (database.embedded) return;
  let problem: string | undefined;
  let tls: DatabaseTls | undefined;
  try {
    // An unreadable sslrootcert is a setting's problem, said as such, not as the pooler check's.
    tls = databaseTls(database.url);
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  }
  try {
    problem = await hiddenPoolerProblem(database.url, pooler, tls);
  } catch (err) {
    if (err instanceof CannotConnectError) problem = err.message;
    else
      problem = `Cannot check DATABASE_URL for a transaction pooler (set DATABASE_POOLER=transaction if there is one): ${err instanceof Error ? err.message : String(err)}`;
  }
  if (problem === undefined) return;
  console.error(problem);
  process.exit(1);
}

/**
 * The database of a one-shot command (`inbox`, `billing`, `migrate`): {@link openDatabase} (prints
 * `Cannot open the database: <why>` and exits 1 on failure, never quoting DATABASE_URL), then
 * {@link refuseHiddenPooler}, then a pool of `max` connections named `applicationName` with the
 * `DATABASE_POOLER` setting of `env`.
 */
export async function openCommandDatabase(
  env: Record<string, string | undefined>,
  applicationName: string,
  max: number,
): Promise<{ database: DatabaseHandle; db: Db }> {
  const database = await openDatabase(env).catch((err: unknown) => {
    console.error(`Cannot open the database: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
  const pooler = poolerFromEnv(env);
  await refuseHiddenPooler(database, pooler);
  return { database, db: connectDatabase(database.url, { max, applicationName, pooler }) };
}
