// What a failure to connect to PostgreSQL looks like to an operator. Portable: postgres.js errors only.
import { isDatabaseUnavailable, sqlState } from "./db.ts";

/** Node/Bun error codes of a host name that does not resolve or a TLS handshake that failed. */
const CONNECT_CODES = ["ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"];

/**
 * True when `err` says the connection itself failed, not a statement: the database unreachable or
 * gone (see isDatabaseUnavailable), SQLSTATE class 28 (invalid authorization: wrong password, no such
 * role) or 3D000 (no such database), a host name that does not resolve, or a failed TLS handshake.
 * PostgreSQL manual, Appendix A.
 */
export function isConnectFailure(err: unknown): boolean {
  if (isDatabaseUnavailable(err)) return true;
  const state = sqlState(err);
  if (state) return state.startsWith("28") || state === "3D000";
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && (CONNECT_CODES.includes(code) || code.startsWith("ERR_TLS_") || code.startsWith("ERR_SSL_") || isCertificateRefusal(err));
}

/**
 * True when TLS verification refused the server's certificate (Node/Bun/Deno `tls` codes such as
 * UNABLE_TO_VERIFY_LEAF_SIGNATURE, SELF_SIGNED_CERT_IN_CHAIN, CERT_HAS_EXPIRED,
 * ERR_TLS_CERT_ALTNAME_INVALID): a setting to fix, never worth waiting for.
 */
export function isCertificateRefusal(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/.test(code);
}

/**
 * `Cannot connect to the database: <reason>` for `err`, with postgres.js's or the socket's message
 * as the reason. The URL is never quoted (its password would be in it); a host name may be, as the
 * resolver's own message names it.
 */
export function cannotConnectMessage(err: unknown): string {
  const reason = err instanceof Error ? err.message : String(err);
  if (isCertificateRefusal(err))
    return `Cannot connect to the database: its TLS certificate not accepted (${reason.trim()}): sslrootcert must name the CA that signed the server's certificate, and with sslmode=verify-full the URL's host must be a name the certificate lists`;
  return `Cannot connect to the database: ${reason}`;
}

/** The check or command could not connect at all; `message` is {@link cannotConnectMessage}, `cause` the original error. */
export class CannotConnectError extends Error {
  constructor(cause: unknown) {
    super(cannotConnectMessage(cause), { cause });
    this.name = "CannotConnectError";
  }
}
