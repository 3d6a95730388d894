// Edge file: the start-up refusal of a command whose DATABASE_URL leads to an undeclared transaction pooler.
import type { Pooler } from "../db/db.ts";
import { CannotConnectError } from "../db/connect-failure.ts";
import { hiddenPoolerProblem } from "../db/pooler-check.ts";

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
  try {
    problem = await hiddenPoolerProblem(database.url, pooler);
  } catch (err) {
    if (err instanceof CannotConnectError) problem = err.message;
    else problem = `Cannot check DATABASE_URL for a transaction pooler (set DATABASE_POOLER=transaction if there is one): ${err instanceof Error ? err.message : String(err)}`;
  }
  if (problem === undefined) return;
  console.error(problem);
  process.exit(1);
}
