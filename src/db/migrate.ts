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

/**
 * Applies pending migrations in one transaction that first takes `pg_advisory_xact_lock`, so
 * concurrent starts queue instead of clashing (the second finds nothing to do). Applied files are
 * recorded in `schema_migrations` with a SHA-256 of their text. Returns the names applied now.
 * @throws Error on a gap in the numbering, a database newer than the files, or an applied file whose
 *   text changed since (forward-only: add a new file instead). Nothing is applied then.
 * Follows postgres-shift's runner (numbered files, gap check, one `sql.begin`).
 * @throws Error from {@link assertSupportedPostgres} on a server older than PostgreSQL 14.
 */
export async function migrate(db: Db, migrations: readonly Migration[]): Promise<string[]> {
  await assertSupportedPostgres(db);
  const files = [...migrations].sort((a, b) => a.version - b.version);
  files.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`Cannot migrate: expected migration ${i + 1}, found ${m.name} (gap in sql/ numbering)`);
  });
  const sums = await Promise.all(files.map((m) => sha256(m.sql)));
  return db.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext(${LOCK_KEY}))`;
    await tx`
      create table if not exists schema_migrations (
        version    integer     primary key,
        name       text        not null,
        checksum   text        not null,
        applied_at timestamptz not null default now()
      )
    `;
    const applied = await tx<{ version: number; name: string; checksum: string }[]>`
      select version, name, checksum
        from schema_migrations
       order by version
    `;
    for (const row of applied) {
      const file = files[row.version - 1];
      if (!file)
        throw new Error(`Cannot migrate: database has migration ${row.name}, which is not in sql/ (code older than the database?)`);
      if (sums[row.version - 1] !== row.checksum)
        throw new Error(`Cannot migrate: ${file.name} changed after it was applied; add a new migration instead`);
    }
    const pending = files.slice(applied.length);
    for (const m of pending) {
      await tx.unsafe(m.sql);
      await tx`
        insert into schema_migrations (version, name, checksum)
        values (${m.version}, ${m.name}, ${sums[m.version - 1] ?? ""})
      `;
    }
    return pending.map((m) => m.name);
  });
}

async function sha256(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
