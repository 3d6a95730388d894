import type { Db } from "./db.ts";

/** One forward-only migration: `sql/NNNN_name.sql`. */
export interface Migration {
  /** NNNN from the file name; versions must run 1, 2, 3, … without gaps. */
  version: number;
  /** File name, e.g. `0001_inbox.sql`. */
  name: string;
  sql: string;
}

const LOCK_KEY = "webhook-inbox:migrate";

/** Oldest PostgreSQL major the migrations and queries are tested on (README, "Supported PostgreSQL"). */
export const MIN_POSTGRES_MAJOR = 14;

/**
 * Refuses a server older than {@link MIN_POSTGRES_MAJOR} with one line naming both versions
 * (`server_version_num`, PostgreSQL manual, "Preset Options"). Majors 14 to 18 run the same
 * migrations and are each tested (`bun run test:postgres-versions`); older ones are not, so they are
 * refused before anything is written rather than failing half-way.
 * @throws Error "PostgreSQL 14 or later is required; this server runs 13.x" on an older server.
 */
export async function assertSupportedPostgres(db: Db): Promise<void> {
  const [row] = await db<{ num: number; version: string }[]>`
    select current_setting('server_version_num')::int as num, current_setting('server_version') as version
  `;
  if (row && row.num < MIN_POSTGRES_MAJOR * 10_000)
    throw new Error(`PostgreSQL ${MIN_POSTGRES_MAJOR} or later is required; this server runs ${row.version}`);
}

/** The table that records the package's migrations (sql/). */
export const PACKAGE_MIGRATIONS_TABLE = "schema_migrations";
/** The table that records an app's own migrations (its configuration's `migrations` folder), kept apart from the package's. */
export const APP_MIGRATIONS_TABLE = "app_schema_migrations";

/** Where a database's schema stands against the code: see {@link schemaStatus}. */
export interface SchemaStatus {
  /** Highest package migration applied, 0 when none (no `schema_migrations` table yet). */
  database: number;
  /** Name of that migration, e.g. `0028_outbox_message_unique.sql`; undefined when none. */
  databaseName: string | undefined;
  /** Highest package migration the code has. */
  code: number;
  /** `current`: same; `behind`: the database lacks migrations (run migrate); `ahead`: the database is newer than the code. */
  state: "current" | "behind" | "ahead";
}

/**
 * Compares the package migrations a database has applied (`schema_migrations`) with the ones the code
 * has, without changing anything. Used at start by long-running commands that do not migrate
 * themselves (`MIGRATE_ON_START=false`) and before migrating, so a database newer than the code is
 * refused with both versions named (docs/upgrading.md).
 */
export async function schemaStatus(db: Db, migrations: readonly Migration[]): Promise<SchemaStatus> {
  const code = migrations.reduce((max, m) => Math.max(max, m.version), 0);
  const [exists] = await db<{ present: boolean }[]>`select to_regclass('schema_migrations') is not null as present`;
  let database = 0;
  let databaseName: string | undefined;
  if (exists?.present) {
    const [row] = await db<{ version: number; name: string }[]>`
      select version, name from schema_migrations order by version desc limit 1
    `;
    if (row) ({ version: database, name: databaseName } = row);
  }
  return { database, databaseName, code, state: database === code ? "current" : database < code ? "behind" : "ahead" };
}

/** One line naming both versions when a database is newer than the code (see {@link schemaStatus}). */
export function aheadMessage(status: SchemaStatus): string {
  return (
    `the database's schema is at migration ${status.databaseName ?? status.database}, newer than this code's ` +
    `(${status.code} migrations): run the webhook-inbox release that applied it, or newer (docs/upgrading.md)`
  );
}

/**
 * Applies pending migrations in one transaction that first takes `pg_advisory_xact_lock`, so
 * concurrent starts queue instead of clashing (the second finds nothing to do): first the package's
 * (`migrations`, recorded in `schema_migrations`), then the app's own (`app`, recorded apart in
 * `app_schema_migrations`, numbered 1, 2, 3, … on their own), each with a SHA-256 of its text. Returns
 * the names applied now, the app's prefixed `app/` (e.g. `["0028_outbox_message_unique.sql", "app/0001_customers.sql"]`).
 * @throws Error on a gap in either numbering, a database newer than the files ({@link aheadMessage}
 *   for the package's), or an applied file whose text changed since (forward-only: add a new file
 *   instead). Nothing is applied then.
 * Follows postgres-shift's runner (numbered files, gap check, one `sql.begin`).
 * @throws Error from {@link assertSupportedPostgres} on a server older than PostgreSQL 14.
 */
export async function migrate(db: Db, migrations: readonly Migration[], app: readonly Migration[] = []): Promise<string[]> {
  await assertSupportedPostgres(db);
  const sets = [
    { table: PACKAGE_MIGRATIONS_TABLE, files: ordered(migrations, "sql/"), prefix: "" },
    { table: APP_MIGRATIONS_TABLE, files: ordered(app, "the app's migrations folder"), prefix: "app/" },
  ].filter((set, i) => i === 0 || set.files.length > 0);
  const sums = await Promise.all(sets.map((set) => Promise.all(set.files.map((m) => sha256(m.sql)))));
  return db.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext(${LOCK_KEY}))`;
    const done: string[] = [];
    for (const [i, { table, files, prefix }] of sets.entries()) {
      const sum = sums[i] ?? [];
      await tx`
        create table if not exists ${tx(table)} (
          version    integer     primary key,
          name       text        not null,
          checksum   text        not null,
          applied_at timestamptz not null default now()
        )
      `;
      const applied = await tx<{ version: number; name: string; checksum: string }[]>`
        select version, name, checksum from ${tx(table)} order by version
      `;
      for (const row of applied) {
        const file = files[row.version - 1];
        if (!file) {
          if (prefix)
            throw new Error(`Cannot migrate: the database has app migration ${row.name}, which is not in the app's migrations folder`);
          const last = applied[applied.length - 1] ?? row;
          throw new Error(
            `Cannot migrate: ${aheadMessage({ database: last.version, databaseName: last.name, code: files.length, state: "ahead" })}`,
          );
        }
        if (file.name !== row.name)
          throw new Error(
            `Cannot migrate: ${prefix}${row.name} was applied as number ${row.version}, and that number is now ${prefix}${file.name}; put the file back under its name`,
          );
        if (sum[row.version - 1] !== row.checksum)
          throw new Error(`Cannot migrate: ${prefix}${file.name} changed after it was applied; add a new migration instead`);
      }
      for (const m of files.slice(applied.length)) {
        await tx.unsafe(m.sql).catch((err: unknown) => {
          // The file's name first: PostgreSQL's message alone ("syntax error at or near …") does not say which file.
          if (err instanceof Error) err.message = `${prefix}${m.name}: ${err.message}`;
          throw err;
        });
        await tx`
          insert into ${tx(table)} (version, name, checksum)
          values (${m.version}, ${m.name}, ${sum[m.version - 1] ?? ""})
        `;
        done.push(prefix + m.name);
      }
    }
    return done;
  });
}

/** `migrations` sorted by version; throws on two files of one number, and on a gap (versions run 1, 2, 3, …). */
function ordered(migrations: readonly Migration[], where: string): Migration[] {
  const files = [...migrations].sort((a, b) => a.version - b.version);
  files.forEach((m, i) => {
    const previous = files[i - 1];
    if (previous?.version === m.version) throw new Error(`Cannot migrate: ${previous.name} and ${m.name} have the same number (${where})`);
    if (m.version !== i + 1) throw new Error(`Cannot migrate: expected migration ${i + 1}, found ${m.name} (gap in ${where} numbering)`);
  });
  return files;
}

async function sha256(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The schema step of a long-running command's start (serve, worker, dispatch): with `migrateOnStart`
 * (the default; `MIGRATE_ON_START=false` turns it off) applies what is pending ({@link migrate}) and
 * returns it; without, applies nothing and checks that the database has exactly the code's
 * migrations, package's and app's, returning `[]`.
 * @throws Error when the database is behind ("run `webhook-inbox migrate`", both versions named) or
 *   ahead ({@link aheadMessage}) of the code, or as {@link migrate}.
 */
export async function schemaAtStart(
  db: Db,
  migrations: readonly Migration[],
  app: readonly Migration[],
  migrateOnStart: boolean,
): Promise<string[]> {
  if (migrateOnStart) return migrate(db, migrations, app);
  const status = await schemaStatus(db, migrations);
  if (status.state === "ahead") throw new Error(aheadMessage(status));
  if (status.state === "behind")
    throw new Error(
      `the database's schema is at migration ${status.databaseName ?? "none"} (${status.database}), older than this code's ` +
        `(${status.code} migrations), and MIGRATE_ON_START=false: run \`webhook-inbox migrate\` first (docs/upgrading.md)`,
    );
  if (app.length > 0) {
    const [table] = await db<{ present: boolean }[]>`select to_regclass('app_schema_migrations') is not null as present`;
    const [row] = table?.present ? await db<{ n: number }[]>`select count(*)::int as n from app_schema_migrations` : [{ n: 0 }];
    const applied = row?.n ?? 0;
    if (applied < app.length)
      throw new Error(
        `the database has ${applied} of the app's migrations and the app has ${app.length}, and MIGRATE_ON_START=false: ` +
          "run `webhook-inbox migrate` (docs/upgrading.md)",
      );
    if (applied > app.length)
      throw new Error(
        `the database has ${applied} of the app's migrations and the app has only ${app.length}: the database is newer than ` +
          "this app's code (a release that added migrations ran against it); run that release, or newer (docs/upgrading.md)",
      );
  }
  return [];
}

/**
 * `MIGRATE_ON_START`: `true` (default when unset or empty) or `false`.
 * @throws Error naming the variable and the value given otherwise.
 */
export function readMigrateOnStart(env: Record<string, string | undefined>): boolean {
  const raw = env.MIGRATE_ON_START?.trim() ?? "";
  if (raw === "" || raw === "true") return true;
  if (raw === "false") return false;
  throw new Error(`MIGRATE_ON_START must be true or false, got "${raw}"`);
}
