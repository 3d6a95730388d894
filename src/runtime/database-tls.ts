// Edge file: reads the CA certificate file that DATABASE_URL's `sslrootcert` names (node:fs: Bun,
// Node.js, and Deno with read permission for that path), for connect()'s TLS settings.
import { readFileSync } from "node:fs";
import { connect, databaseTlsOf, type ConnectOptions, type DatabaseTls, type Db } from "../db/db.ts";

/**
 * The TLS settings `url` asks for, its `sslrootcert` file read as PEM text: pass them to `connect(url,
 * { tls })`. Undefined when the URL has no `sslmode` or `sslrootcert` (postgres.js's default: no TLS).
 * Follows libpq (PostgreSQL manual, 32.19 "SSL Support"): `sslmode=verify-full&sslrootcert=/path/ca.pem`
 * checks the server's chain against that CA and its name against the host; `verify-ca` only the chain.
 * @throws Error in one line naming the file and why it cannot be read (never the URL's password); under
 *   Deno, how to allow reading it.
 */
export function databaseTls(url: string): DatabaseTls | undefined {
  const { mode, rootCertFile } = databaseTlsOf(url);
  if (rootCertFile === undefined) return mode ? { mode } : undefined;
  let ca: string;
  try {
    ca = readFileSync(rootCertFile, "utf8");
  } catch (err) {
    const code = (err as { code?: string; name?: string }).code ?? (err as Error).name;
    const deno = "Deno" in globalThis ? ` (Deno: add it to --allow-read, e.g. --allow-read=sql,${rootCertFile})` : "";
    throw new Error(`Cannot read sslrootcert ${rootCertFile} named in DATABASE_URL: ${code}${deno}`);
  }
  if (!ca.includes("-----BEGIN CERTIFICATE-----"))
    throw new Error(`sslrootcert ${rootCertFile} named in DATABASE_URL holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  return { mode: mode ?? "verify-ca", ca };
}

/**
 * {@link connect} with the TLS settings of `url` ({@link databaseTls}): how every command and server of
 * this repository opens its pool on DATABASE_URL.
 * @throws what {@link databaseTls} and {@link connect} throw.
 */
export function connectDatabase(url: string, options: Omit<ConnectOptions, "tls"> = {}): Db {
  return connect(url, { ...options, tls: databaseTls(url) });
}
