// Edge file: a throwaway database on a server the user points at (DATABASE_URL), for commands that
// write test data (`bun run chaos`, `bun run bench`) and must never touch the user's own tables.
import postgres from "postgres";
import { databaseUrlProblem } from "../db/database-url.ts";

/** A scratch database: its URL and how to drop it. */
export interface ScratchDatabase {
  /** `DATABASE_URL` with the path replaced by the scratch database's name. */
  url: string;
  /** Drops the database (`with (force)`: open connections are closed) and closes the admin connection; idempotent. */
  drop(): Promise<void>;
}

/**
 * Creates `<prefix>_<pid>_<ms>` on the server of `serverUrl` (its user needs CREATEDB) and returns its
 * URL. The database named in `serverUrl` is used only to connect; nothing in it is read or written.
 * PostgreSQL manual, CREATE DATABASE and DROP DATABASE (`FORCE`, PostgreSQL ≥ 13).
 * @throws Error from {@link databaseUrlProblem} (never quoting the URL) before anything connects when
 *   `serverUrl` cannot be read unambiguously; the server's error when the database cannot be created
 *   (e.g. no CREATEDB privilege).
 */
export async function createScratchDatabase(serverUrl: string, prefix: string): Promise<ScratchDatabase> {
  if (!/^[a-z_][a-z0-9_]*$/.test(prefix)) throw new Error(`Scratch database prefix must be a lowercase identifier, got "${prefix}"`);
  const problem = databaseUrlProblem(serverUrl);
  if (problem) throw new Error(problem);
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  const name = `${prefix}_${process.pid}_${Date.now()}`;
  try {
    await admin.unsafe(`create database ${name}`);
  } catch (err) {
    await admin.end({ timeout: 1 });
    throw err;
  }
  let dropped = false;
  return {
    url: withDatabase(serverUrl, name),
    async drop() {
      if (dropped) return;
      dropped = true;
      await admin.unsafe(`drop database if exists ${name} with (force)`);
      await admin.end({ timeout: 5 });
    },
  };
}

/**
 * `url` naming `database` instead of its own: the path is replaced and the `database` / `db` query
 * parameters are removed, because postgres.js lets them override the path (it passes unknown query
 * parameters on as startup parameters): a scratch URL that kept `?database=prod` would write into prod.
 * @throws TypeError when `url` is not a URL.
 */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  u.searchParams.delete("database");
  u.searchParams.delete("db");
  return u.toString();
}
