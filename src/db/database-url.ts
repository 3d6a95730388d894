// Reading DATABASE_URL conservatively, before postgres.js or a DNS lookup ever sees it.
//
// postgres.js 3.4.9 (`parseUrl` in src/index.js) takes the hosts from after the FIRST `@` up to the
// first `/` or `?`, but the user name, password and first host from WHATWG `new URL`, which ends the
// authority at the first `/ ? #` and splits user-info from host at the LAST `@`. A password with an
// unencoded `@ / ? #` therefore becomes part of a host name: `user:p@ss#word@db` connects to `ss`,
// sends it to DNS and prints it in `getaddrinfo ENOTFOUND ss`. So the raw string is read here with
// rules under which every reader agrees, and anything else is refused without quoting any of it.

const SCHEME = /^postgres(ql)?:\/\//;
/** One host of a (comma-separated) host list: a name or IPv4 address with an optional port. */
const HOST = /^[A-Za-z0-9._~%-]+(:\d{1,5})?$/;
const IPV6 = /^\[[0-9A-Fa-f:.]*\](:\d{1,5})?$/;

const NOT_SHOWN = "(value not shown)";
const ENCODE = "percent-encode them (@ as %40, : as %3A, / as %2F, ? as %3F, # as %23, % as %25)";

/**
 * What is wrong with a `DATABASE_URL`, or undefined when it is usable. The message never quotes any
 * part of the URL (it holds the password). Refused: another scheme than `postgres://` or
 * `postgresql://`; a `#` anywhere; more than one `@`, or an `@` after the first `/` or `?` (an
 * unencoded `@ / ? #` in the user-info would move the boundary between password and host); more than
 * one `:` in the user-info; a `%` that does not start a valid escape; no host, or a host list that is
 * not `host[:port][,host[:port]…]` with ports up to 65535; an IPv6 literal `[…]` (postgres.js 3.4.9
 * reads its host as `[`); anything else WHATWG `new URL` cannot parse. Accepted shapes include
 * `postgres://host/db`, `postgres://user@host`, `postgres://user:p%40ss@h1:5432,h2:5433/db?sslmode=require`.
 */
export function databaseUrlProblem(url: string): string | undefined {
  const scheme = SCHEME.exec(url);
  if (!scheme) return "DATABASE_URL must start with postgres:// or postgresql://";
  const rest = url.slice(scheme[0].length);
  const end = rest.search(/[/?]/);
  const authority = end === -1 ? rest : rest.slice(0, end);
  const at = authority.indexOf("@");
  if (url.includes("#") || rest.indexOf("@", at + 1) !== -1) {
    return `DATABASE_URL cannot be read unambiguously ${NOT_SHOWN}: it holds a # or more than one @, or an @ after a / or ?; if they belong to the user name or password, ${ENCODE}`;
  }
  const userInfo = at === -1 ? undefined : authority.slice(0, at);
  if (userInfo !== undefined && userInfo.split(":").length > 2) {
    return `DATABASE_URL cannot be read unambiguously ${NOT_SHOWN}: its user-info holds more than one :; in the user name or password, ${ENCODE}`;
  }
  if (userInfo !== undefined && !userInfo.split(":").every(decodes)) {
    return `DATABASE_URL has a % that does not start a valid escape in the user name or password ${NOT_SHOWN}: write % as %25`;
  }
  const hosts = authority.slice(at + 1);
  const query = rest.includes("?") ? new URLSearchParams(rest.slice(rest.indexOf("?") + 1)) : new URLSearchParams();
  return (
    hostsProblem(hosts) ??
    sslModeProblem(query.get("sslmode")) ??
    targetSessionProblem(query.get("target_session_attrs")) ??
    wholeUrlProblem(`${scheme[0]}${userInfo === undefined ? "" : `${userInfo}@`}${hosts.split(",")[0]}${rest.slice(authority.length)}`)
  );
}

/** libpq's `sslmode` values (PostgreSQL manual, 32.19 "SSL Support", Table 32.1). */
const SSL_MODES: readonly string[] = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"];

/**
 * The problem with DATABASE_URL's `sslmode` value `mode` (null or undefined: none given), or undefined
 * when libpq knows it (PostgreSQL manual, 32.19 "SSL Support"); postgres.js would try TLS anyway.
 */
export function sslModeProblem(mode: string | null | undefined): string | undefined {
  return mode == null || SSL_MODES.includes(mode) ? undefined : `DATABASE_URL: sslmode=${mode} is not one of ${SSL_MODES.join(", ")}`;
}

/**
 * `target_session_attrs=read-write` is refused: postgres.js 3.4.9 trusts the `default_transaction_read_only`
 * a PostgreSQL 14+ server reports at login, which is `off` on a hot standby too, so after a failover it
 * may stay on the standby and every write fails (503s, SQLSTATE 25006). `primary` checks
 * `pg_is_in_recovery()` and works (docs/failover.md; postgres.js README, "Multi-host connections").
 */
function targetSessionProblem(value: string | null): string | undefined {
  return value === "read-write"
    ? "DATABASE_URL asks for target_session_attrs=read-write, which postgres.js 3.4.9 can satisfy with a hot standby (writes then fail): use target_session_attrs=primary"
    : undefined;
}

function hostsProblem(hosts: string): string | undefined {
  const list = hosts.split(",");
  if (list.some((h) => IPV6.test(h))) {
    return `DATABASE_URL names an IPv6 address in brackets ${NOT_SHOWN}, which postgres.js 3.4.9 cannot connect to (it reads the host as "["): use a host name that resolves to it`;
  }
  const valid = (h: string): boolean => HOST.test(h) && Number(h.split(":")[1] ?? 0) <= 65_535 && decodes(h);
  if (hosts === "" || !list.every(valid)) {
    return `DATABASE_URL names no valid host ${NOT_SHOWN}: after user:password@ comes host[:port], or several as host1:5432,host2:5432 (ports up to 65535)`;
  }
  return undefined;
}

/** What postgres.js itself does next: WHATWG `new URL` of the URL with its host list cut to the first host. */
function wholeUrlProblem(firstHostUrl: string): string | undefined {
  try {
    new URL(firstHostUrl);
    return undefined;
  } catch {
    return `DATABASE_URL is not a valid URL ${NOT_SHOWN}: check the database name and query parameters, and in the user name or password ${ENCODE}`;
  }
}

function decodes(text: string): boolean {
  try {
    decodeURIComponent(text);
    return true;
  } catch {
    return false;
  }
}
