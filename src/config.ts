// Every setting of the receiver, read from the environment and checked at once (one problem per
// variable, all listed together). One file on purpose: the settings and their checks are read as one
// table by operators and by the entry files of every runtime.
import { databaseUrlProblem } from "./db/database-url.ts";
import type { Pooler } from "./db/db.ts";

export { databaseUrlProblem };

/** A configured Stripe endpoint before it is wired to handlers. */
export interface EndpointSettings {
  /** URL segment and inbox `endpoint` value, e.g. `billing`. */
  name: string;
  /** `whsec_…` signing secrets; more than one during a rotation. */
  secrets: string[];
  /** The env variable the secrets came from (for messages), `generated` for the dev secret, or `unused` ({@link loadEndpointsWithoutSecrets}). */
  source: string;
  /** `INBOX_MODE` for billing, `INBOX_MODE_<NAME>` for others; default `sync` (`async` for thin and refetch endpoints, which allow only async). */
  mode: "sync" | "async" | "hybrid";
  /**
   * `STRIPE_ENDPOINT_KIND` for billing, `STRIPE_ENDPOINT_KIND_<NAME>` for others: `classic` (default, snapshot
   * events: the object in the body) or `thin` (an Event Destination's thin notifications, fetched by the worker).
   */
  kind?: "classic" | "thin";
  /**
   * `INBOX_REFETCH` / `INBOX_REFETCH_<NAME>` = `true` (classic endpoints only): the worker applies the
   * object's current state read from the API instead of the event's copy. Default false.
   */
  refetch?: boolean;
  /**
   * `STRIPE_MODE` / `STRIPE_MODE_<NAME>` = `live` | `test`, or derived from `STRIPE_API_KEY`'s prefix
   * (`sk_live_`/`rk_live_` → live, `sk_test_`/`rk_test_` → test) when unset: an event whose `livemode`
   * differs is recorded `ignored_mode`, never applied. Undefined: neither declared nor derivable, the
   * endpoint accepts both modes (refused for a Connect endpoint and with `NODE_ENV=production`). docs/stripe-connect.md.
   */
  livemode?: boolean;
  /**
   * `STRIPE_CONNECT` / `STRIPE_CONNECT_<NAME>` = `true`: the endpoint receives connected accounts'
   * events (Stripe docs, "Connect webhooks"); each is applied under its `account`. Default false: an
   * event with an `account` is parked as needs-review there.
   */
  connect?: boolean;
}

/**
 * An endpoint of a provider other than Stripe (GitHub, Shopify, Paddle, Adyen, Standard Webhooks), one
 * entry `<provider>/<name>` of `WEBHOOK_ENDPOINTS`; its variables end in `_<PROVIDER>_<NAME>` (upper
 * case, `-` → `_`). The provider name is checked against the registry where endpoints are wired
 * (receiver/endpoints.ts `providerEndpoints`). docs/providers/README.md.
 */
export interface ProviderEndpointSettings {
  /** The registered provider's name: URL segment and inbox `provider`, e.g. `github`. */
  provider: string;
  /** URL segment and inbox `endpoint`, e.g. `repos`. */
  name: string;
  /** `WEBHOOK_SECRET_<PROVIDER>_<NAME>`, comma-separated: every currently valid secret (two during a rotation). */
  secrets: string[];
  /** The variable the secrets came from, for messages. */
  source: string;
  /** `INBOX_MODE_<PROVIDER>_<NAME>`: sync (default), async or hybrid. */
  mode: "sync" | "async" | "hybrid";
  /** `WEBHOOK_TOLERANCE_SEC_<PROVIDER>_<NAME>`, seconds (1 to {@link MAX_TOLERANCE_SEC}); undefined: the provider's default. */
  toleranceSec?: number;
}

/** Every setting of the receiver, read and checked at once by {@link loadConfig}. */
export interface Config {
  /** HTTP port. `PORT`, default 3000. */
  port: number;
  /** Listen address. `HOST`, default 127.0.0.1 (behind a reverse proxy on the same host). */
  host: string;
  /** `DATABASE_URL`; undefined means: start the embedded PostgreSQL. */
  databaseUrl: string | undefined;
  /**
   * `DATABASE_POOLER`: `transaction` when `DATABASE_URL` goes through a transaction pooler (PgBouncer
   * `pool_mode = transaction`); then prepared statements are off and workers poll instead of LISTEN.
   * Default `none`.
   */
  databasePooler: Pooler;
  /** How long to wait at start for the database to answer, ms. `DATABASE_WAIT_MS`, default 60000; 0 tries once. */
  databaseWaitMs: number;
  /** Signature tolerance, seconds, both directions. `STRIPE_TOLERANCE_SEC`, default 300, must be > 0. */
  toleranceSec: number;
  /** Body limit, bytes. `MAX_BODY_BYTES`, default 1048576 (1 MiB). */
  maxBodyBytes: number;
  /**
   * Request body bytes held at once across requests; beyond it a request gets 503 before its body is
   * read. `MAX_INFLIGHT_BODY_BYTES`, default 33554432 (32 MiB), at least `maxBodyBytes`.
   */
  maxInflightBodyBytes: number;
  /** Connection pool size, also the deliveries using the database at once. `DB_POOL_MAX`, default 10. */
  dbPoolMax: number;
  /** How long a delivery waits for a free connection before 503, ms. `QUEUE_TIMEOUT_MS`, default 2000. */
  queueTimeoutMs: number;
  /**
   * A delivery's time bound, ms: PostgreSQL's `statement_timeout` for each statement of its
   * transaction, lock waits included, set in the transaction. `STATEMENT_TIMEOUT_MS`, default 10000.
   */
  statementTimeoutMs: number;
  /** Hybrid mode's in-request time bound, ms (in place of `statementTimeoutMs` for that attempt). `HYBRID_BUDGET_MS`, default 2000. */
  hybridBudgetMs: number;
  /** Bearer token for `GET /metrics`. `METRICS_TOKEN`; unset = open (bind to a private interface). */
  metricsToken: string | undefined;
  /** Stripe endpoints; `billing` (from `STRIPE_WEBHOOK_SECRET`) first. */
  endpoints: EndpointSettings[];
  /** Endpoints of the other providers, in `WEBHOOK_ENDPOINTS` order ({@link ProviderEndpointSettings}). */
  providerEndpoints: ProviderEndpointSettings[];
  /** Password of the operator's page at `/admin` (≥ 32 characters, no whitespace, ≥ 10 different characters). `ADMIN_TOKEN`; unset = the page is off (404). */
  adminToken: string | undefined;
  /** `ADMIN_READONLY=true`: the page shows everything and refuses every action. Default false. */
  adminReadonly: boolean;
}

/** All configuration problems at once, one per line, each naming its variable. */
export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`Invalid configuration:\n- ${problems.join("\n- ")}`);
    this.name = "ConfigError";
    this.problems = problems;
  }
}

const SECRET = /^whsec_[A-Za-z0-9+/=_-]{16,}$/;
const ENDPOINT_NAME = /^[a-z][a-z0-9-]{0,62}$/;

/**
 * Largest accepted `STRIPE_TOLERANCE_SEC`, seconds: 1 hour. The tolerance is the window in which a
 * captured delivery can be replayed with a valid signature (Stripe's docs, "Prevent replay attacks":
 * default 5 minutes); a larger value would all but switch that protection off. Clock skew between
 * Stripe and a receiver with NTP is far below this.
 */
export const MAX_TOLERANCE_SEC = 3_600;

/**
 * Largest accepted value of the receiver's time settings (`STATEMENT_TIMEOUT_MS`, `QUEUE_TIMEOUT_MS`,
 * `HYBRID_BUDGET_MS`), ms: 10 minutes. JavaScript timers fire at once for delays above 2^31 − 1 ms,
 * which would answer every delivery 503 at once, and a webhook sender gives up long before.
 */
export const MAX_TIMER_SETTING_MS = 600_000;

/**
 * The shortest `WEBHOOK_SECRET_<PROVIDER>_<NAME>` accepted, in characters. GitHub lets the sender pick any
 * secret ("a random string with high entropy", GitHub Docs, "Validating webhook deliveries"); the others
 * generate long ones (Shopify's app secret, Paddle's `pdl_ntfset_…`, Adyen's 64-hex HMAC key), so only a
 * hand-made secret meets this floor.
 */
export const MIN_PROVIDER_SECRET_LENGTH = 16;

/**
 * Reads the receiver's settings from an environment map (process env or a Workers `env` binding).
 * `STRIPE_WEBHOOK_SECRET` (comma-separated during a rotation) signs the default `billing` endpoint;
 * `STRIPE_ENDPOINTS=a,b` adds endpoints, each with `STRIPE_WEBHOOK_SECRET_<NAME>` (upper case, `-`
 * → `_`); `INBOX_MODE` / `INBOX_MODE_<NAME>` pick sync (default), async or hybrid. Without `DATABASE_URL` a missing billing secret falls back to `devSecret` (local use only);
 * with `DATABASE_URL` or `NODE_ENV=production` it is an error. `NODE_ENV` must be unset, `production`,
 * `development` or `test`; `production` also requires `DATABASE_URL`. Secrets are never echoed in messages.
 * @throws ConfigError listing every problem.
 */
export function loadConfig(env: Record<string, string | undefined>, devSecret?: string): Config {
  const problems: string[] = [];
  const int = (name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const value = Number(raw);
    if (!/^-?\d+$/.test(raw.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`;
      problems.push(`${name} must be an integer ${range}, got "${raw}"`);
    }
    return value;
  };
  const databaseUrl = env.DATABASE_URL || undefined;
  const urlProblem = databaseUrl === undefined ? undefined : databaseUrlProblem(databaseUrl);
  if (urlProblem) problems.push(urlProblem);
  const envProblem = nodeEnvProblem(env);
  if (envProblem) problems.push(envProblem);
  const production = env.NODE_ENV === "production";
  if (production && databaseUrl === undefined) problems.push(PRODUCTION_NEEDS_DATABASE_URL);
  const databasePooler = readPooler(env, problems);
  const readSecrets = (name: string, variable: string): Pick<EndpointSettings, "secrets" | "source"> | undefined => {
    const raw = env[variable];
    if (raw === undefined || raw.trim() === "") {
      if (name === "billing" && databaseUrl === undefined && !production && devSecret) return { secrets: [devSecret], source: "generated" };
      problems.push(`${variable} is required (the ${name} endpoint's whsec_… signing secret)`);
      return undefined;
    }
    const secrets = raw.split(",").map((s) => s.trim());
    secrets.forEach((s, i) => {
      if (!SECRET.test(s))
        problems.push(
          `${variable} value ${i + 1} of ${secrets.length} is not a whsec_… secret (whsec_ followed by at least 16 characters of A–Z, a–z, 0–9, +/=_-)`,
        );
    });
    return { secrets, source: variable };
  };
  const endpoints = readEndpoints(env, problems, readSecrets);
  const config: Config = {
    port: int("PORT", 3000, 0, 65535),
    host: env.HOST || "127.0.0.1",
    databaseUrl,
    databasePooler,
    databaseWaitMs: readDatabaseWaitMs(env, problems),
    toleranceSec: int("STRIPE_TOLERANCE_SEC", 300, 1, MAX_TOLERANCE_SEC),
    maxBodyBytes: int("MAX_BODY_BYTES", 1024 * 1024, 1024),
    maxInflightBodyBytes: int("MAX_INFLIGHT_BODY_BYTES", 32 * 1024 * 1024, 1024),
    dbPoolMax: int("DB_POOL_MAX", 10, 1),
    queueTimeoutMs: int("QUEUE_TIMEOUT_MS", 2000, 1, MAX_TIMER_SETTING_MS),
    statementTimeoutMs: int("STATEMENT_TIMEOUT_MS", 10000, 1, MAX_TIMER_SETTING_MS),
    hybridBudgetMs: int("HYBRID_BUDGET_MS", 2000, 1, MAX_TIMER_SETTING_MS),
    metricsToken: env.METRICS_TOKEN || undefined,
    endpoints,
    providerEndpoints: readProviderEndpoints(env, problems),
    adminToken: env.ADMIN_TOKEN || undefined,
    adminReadonly: readFlag(env, "ADMIN_READONLY", problems),
  };
  if (config.maxInflightBodyBytes < config.maxBodyBytes) {
    problems.push(
      `MAX_INFLIGHT_BODY_BYTES (${config.maxInflightBodyBytes}) must be at least MAX_BODY_BYTES (${config.maxBodyBytes}), or no body of the largest size could ever be read`,
    );
  }
  if (config.metricsToken !== undefined && config.metricsToken.length < 16) problems.push("METRICS_TOKEN must be at least 16 characters");
  if (config.adminToken !== undefined && config.adminToken.length < 32) problems.push("ADMIN_TOKEN must be at least 32 characters");
  // Length alone lets "aaaa…" or 32 spaces through: a guessable password for a page that can requeue and resolve.
  else if (config.adminToken !== undefined && (/\s/.test(config.adminToken) || new Set(config.adminToken).size < 10))
    problems.push("ADMIN_TOKEN must not contain whitespace and needs at least 10 different characters (e.g. openssl rand -hex 32)");
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/**
 * The configured Stripe endpoints, `billing` first, then each of `STRIPE_ENDPOINTS` (names checked,
 * each once): kind, refetch flag and mode from {@link readKind}; the signing secrets from `secretsOf`
 * (given the endpoint's name and its secret variable; undefined leaves the endpoint out, its problem
 * already appended). Appends a problem naming the variable for each invalid value.
 */
function readEndpoints(
  env: Record<string, string | undefined>,
  problems: string[],
  secretsOf: (name: string, variable: string) => Pick<EndpointSettings, "secrets" | "source"> | undefined,
): EndpointSettings[] {
  const endpoints: EndpointSettings[] = [];
  const read = (name: string): void => {
    const suffix = name === "billing" ? "" : `_${name.toUpperCase().replaceAll("-", "_")}`;
    const { mode, ...kindAndRefetch } = readKind(env, suffix, (variable) => readMode(env, variable, problems), problems);
    const account = readAccountMode(env, suffix, problems);
    const secrets = secretsOf(name, `STRIPE_WEBHOOK_SECRET${suffix}`);
    if (secrets) endpoints.push({ name, ...secrets, mode, ...kindAndRefetch, ...account });
  };
  read("billing");
  const seen = new Set(["billing"]);
  for (const name of commaList(env.STRIPE_ENDPOINTS)) {
    // A secret pasted here by mistake must not be echoed: name the entry by position when it looks like one.
    const shown =
      /^whsec_/i.test(name) || name.length > 63 ? `number ${seen.size} (not shown: it looks like a secret or is too long)` : `"${name}"`;
    if (!ENDPOINT_NAME.test(name)) problems.push(`STRIPE_ENDPOINTS entry ${shown} must match ${ENDPOINT_NAME.source}`);
    else if (seen.has(name)) problems.push(`STRIPE_ENDPOINTS names "${name}" twice`);
    else read(name);
    seen.add(name);
  }
  problems.push(...strayEndpointVariables(env, seen));
  return endpoints;
}

/** The entries of a comma-separated variable (`a, b,,c` → `["a", "b", "c"]`), each trimmed, empty ones left out. */
export function commaList(raw: string | undefined): string[] {
  return (raw ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

/** `INBOX_MODE[_<NAME>]` named `variable`: sync (default), async or hybrid; anything else appends a problem naming it (and reads sync). */
function readMode(env: Record<string, string | undefined>, variable: string, problems: string[]): EndpointSettings["mode"] {
  const raw = env[variable] || "sync";
  if (raw === "sync" || raw === "async" || raw === "hybrid") return raw;
  problems.push(`${variable} must be sync, async or hybrid, got "${raw}"`);
  return "sync";
}

/** The per-endpoint variables of Stripe endpoints; `INBOX_MODE_` also serves WEBHOOK_ENDPOINTS' ones. */
const ENDPOINT_VARIABLE = /^(STRIPE_WEBHOOK_SECRET|STRIPE_ENDPOINT_KIND|INBOX_REFETCH|INBOX_MODE|STRIPE_MODE|STRIPE_CONNECT)_(.+)$/;

/**
 * A problem for each per-endpoint variable whose suffix names no configured endpoint (`STRIPE_MODE_CONECT`
 * next to an endpoint `connect`): a misspelt suffix would otherwise leave the endpoint on its default
 * silently (for STRIPE_MODE: accepting both modes). `names` are the Stripe endpoints; the suffixes of
 * `WEBHOOK_ENDPOINTS` entries count for `INBOX_MODE_`.
 */
function strayEndpointVariables(env: Record<string, string | undefined>, names: ReadonlySet<string>): string[] {
  const suffixOf = (name: string) => name.toUpperCase().replaceAll("-", "_");
  const known = new Set([...names].filter((n) => n !== "billing").map(suffixOf));
  const providers = new Set(commaList(env.WEBHOOK_ENDPOINTS).map((s) => suffixOf(s.replace("/", "_"))));
  const listed = [...names].join(", ");
  return Object.keys(env)
    .filter((key) => env[key] !== undefined && env[key] !== "")
    .flatMap((key) => {
      const m = ENDPOINT_VARIABLE.exec(key);
      if (!m || known.has(m[2]!) || (m[1] === "INBOX_MODE" && providers.has(m[2]!))) return [];
      // billing's own variables take no suffix (INBOX_MODE, not INBOX_MODE_BILLING).
      if (m[2] === "BILLING") return [`${key}: the billing endpoint's variable is ${m[1]}, without a suffix`];
      return [`${key} names no configured endpoint (the Stripe endpoints are ${listed}; add it to STRIPE_ENDPOINTS or fix the name)`];
    })
    .sort();
}

/**
 * The endpoints of `WEBHOOK_ENDPOINTS=<provider>/<name>,…` ({@link ProviderEndpointSettings}): names
 * checked (Stripe's own endpoints are configured by `STRIPE_ENDPOINTS`), each once; secrets required
 * (comma-separated, none empty or with whitespace; never echoed), mode and tolerance checked. Appends a
 * problem naming the variable for each invalid value.
 */
function readProviderEndpoints(env: Record<string, string | undefined>, problems: string[]): ProviderEndpointSettings[] {
  const endpoints: ProviderEndpointSettings[] = [];
  const seen = new Set<string>();
  for (const [i, entry] of commaList(env.WEBHOOK_ENDPOINTS).entries()) {
    const [provider = "", name = "", ...rest] = entry.split("/");
    const shown = /^whsec_|^pdl_|^shpss_/i.test(entry) || entry.length > 127 ? `number ${i + 1} (not shown)` : `"${entry}"`;
    if (rest.length > 0 || !ENDPOINT_NAME.test(provider) || !ENDPOINT_NAME.test(name)) {
      problems.push(`WEBHOOK_ENDPOINTS entry ${shown} must be <provider>/<name>, each matching ${ENDPOINT_NAME.source}`);
      continue;
    }
    if (provider === "stripe" || provider === "stripe-thin") {
      problems.push(
        `WEBHOOK_ENDPOINTS entry ${shown}: Stripe endpoints are configured by STRIPE_ENDPOINTS and STRIPE_WEBHOOK_SECRET_<NAME>`,
      );
      continue;
    }
    const suffix = `${provider}_${name}`.toUpperCase().replaceAll("-", "_");
    if (seen.has(suffix)) {
      problems.push(`WEBHOOK_ENDPOINTS names ${shown} twice (or two entries share the variables' suffix _${suffix})`);
      continue;
    }
    seen.add(suffix);
    const source = `WEBHOOK_SECRET_${suffix}`;
    const raw = env[source];
    const secrets = (raw ?? "").split(",").map((s) => s.trim());
    if (raw === undefined || raw.trim() === "") problems.push(`${source} is required (the ${provider}/${name} endpoint's signing secret)`);
    else if (secrets.some((s) => s === "" || /\s/.test(s)))
      problems.push(`${source} must be comma-separated secrets, none empty or holding whitespace`);
    else if (secrets.some((s) => s.length < MIN_PROVIDER_SECRET_LENGTH))
      problems.push(
        `${source}: each secret must be at least ${MIN_PROVIDER_SECRET_LENGTH} characters (a short secret can be guessed; use a random one)`,
      );
    const mode = readMode(env, `INBOX_MODE_${suffix}`, problems);
    const toleranceVar = `WEBHOOK_TOLERANCE_SEC_${suffix}`;
    const rawTolerance = env[toleranceVar];
    const toleranceSec = rawTolerance ? Number(rawTolerance) : undefined;
    if (toleranceSec !== undefined && (!/^\d+$/.test(rawTolerance ?? "") || toleranceSec < 1 || toleranceSec > MAX_TOLERANCE_SEC))
      problems.push(`${toleranceVar} must be an integer from 1 to ${MAX_TOLERANCE_SEC}, got "${rawTolerance}"`);
    endpoints.push({
      provider,
      name,
      secrets,
      source,
      mode,
      ...(toleranceSec === undefined ? {} : { toleranceSec }),
    });
  }
  return endpoints;
}

/**
 * The configured Stripe endpoints for what verifies no signature: event backfill (`reconcile events`,
 * the catch-up of `serve` and `worker`) reads events from the Stripe API with `STRIPE_API_KEY`. Names,
 * kinds, modes and refetch flags are read and checked as {@link loadConfig} reads them, billing first;
 * the signing secrets (`STRIPE_WEBHOOK_SECRET[_<NAME>]`) are neither read nor required: each endpoint
 * has `secrets: []` and `source: "unused"`.
 * @throws ConfigError listing every problem, each naming its variable.
 */
export function loadEndpointsWithoutSecrets(env: Record<string, string | undefined>): EndpointSettings[] {
  const problems: string[] = [];
  const endpoints = readEndpoints(env, problems, () => ({ secrets: [], source: "unused" }));
  if (problems.length > 0) throw new ConfigError(problems);
  return endpoints;
}

/**
 * An endpoint's kind, refetch flag and mode from `STRIPE_ENDPOINT_KIND<suffix>`, `INBOX_REFETCH<suffix>` and
 * `INBOX_MODE<suffix>` (`suffix` is `""` for billing, `_<NAME>` otherwise). Thin endpoints and refetch
 * endpoints read the Stripe API before applying, which only the worker does: their mode defaults to and
 * must be `async`. Refetch applies to classic endpoints only. Appends a problem naming the variable for
 * each invalid value.
 */
function readKind(
  env: Record<string, string | undefined>,
  suffix: string,
  readMode: (variable: string) => EndpointSettings["mode"],
  problems: string[],
): Pick<EndpointSettings, "mode" | "kind" | "refetch"> {
  // Only values other than the defaults are returned (classic, no refetch), so settings read as before stay as they were.
  const kindVar = `STRIPE_ENDPOINT_KIND${suffix}`;
  const rawKind = env[kindVar] || "classic";
  const kind = rawKind === "thin" ? "thin" : "classic";
  if (rawKind !== "thin" && rawKind !== "classic") problems.push(`${kindVar} must be classic or thin, got "${rawKind}"`);
  const refetchVar = `INBOX_REFETCH${suffix}`;
  const rawRefetch = env[refetchVar] || "false";
  const refetch = rawRefetch === "true";
  if (rawRefetch !== "true" && rawRefetch !== "false") problems.push(`${refetchVar} must be true or false, got "${rawRefetch}"`);
  if (refetch && kind === "thin")
    problems.push(`${refetchVar} applies to classic endpoints only: a thin endpoint (${kindVar}=thin) always reads the current object`);
  const modeVar = `INBOX_MODE${suffix}`;
  if (kind === "classic" && !refetch) return { mode: readMode(modeVar) };
  const rawMode = env[modeVar];
  if (rawMode && rawMode !== "async") {
    const why = kind === "thin" ? `${kindVar}=thin` : `${refetchVar}=true`;
    problems.push(
      `${modeVar} must be async (or unset) with ${why}: the worker reads the Stripe API before applying, never the request; got "${rawMode}"`,
    );
  }
  return kind === "thin" ? { mode: "async", kind } : { mode: "async", refetch };
}

/** The mode a Stripe API key is for, from its prefix (`sk_live_`, `rk_test_`, …); undefined for anything else. */
export function apiKeyLivemode(key: string | undefined): boolean | undefined {
  const m = /^(?:sk|rk)_(live|test)_/.exec((key ?? "").trim());
  return m ? m[1] === "live" : undefined;
}

/**
 * An endpoint's Connect flag and mode from `STRIPE_CONNECT<suffix>` and `STRIPE_MODE<suffix>` (suffix as
 * in {@link readKind}). The mode is the declared one, else the one `STRIPE_API_KEY`'s prefix says
 * ({@link apiKeyLivemode}); a declared mode contradicting the key, and a Connect endpoint or any endpoint
 * under `NODE_ENV=production` with no mode at all, are problems (one line each, naming the variables).
 * Only set fields are returned.
 */
function readAccountMode(
  env: Record<string, string | undefined>,
  suffix: string,
  problems: string[],
): Pick<EndpointSettings, "livemode" | "connect"> {
  const connectVar = `STRIPE_CONNECT${suffix}`;
  const connect = readFlag(env, connectVar, problems);
  const modeVar = `STRIPE_MODE${suffix}`;
  const raw = env[modeVar] || undefined;
  if (raw !== undefined && raw !== "live" && raw !== "test") problems.push(`${modeVar} must be live or test, got "${raw}"`);
  const declared = raw === "live" ? true : raw === "test" ? false : undefined;
  const fromKey = apiKeyLivemode(env.STRIPE_API_KEY);
  const name = (live: boolean) => (live ? "live" : "test");
  if (declared !== undefined && fromKey !== undefined && declared !== fromKey)
    problems.push(`${modeVar}=${name(declared)} contradicts STRIPE_API_KEY, a ${name(fromKey)}-mode key: set one mode for both`);
  const livemode = declared ?? fromKey;
  // Without a mode an endpoint books test-mode events too: a Connect endpoint (both modes share one secret) and production refuse it.
  const why = connect ? "a Connect endpoint receives both modes with one secret" : "without one, test-mode events are booked as well";
  if (livemode === undefined && (connect || env.NODE_ENV === "production"))
    problems.push(
      `${connect ? `${connectVar}=true` : "NODE_ENV=production"} needs a mode: set ${modeVar}=live or test (or a STRIPE_API_KEY sk_live_/sk_test_): ${why}`,
    );
  return { ...(livemode === undefined ? {} : { livemode }), ...(connect ? { connect } : {}) };
}

/** A boolean variable: unset, empty or `false` is false, `true` is true; anything else is a problem naming it. */
function readFlag(env: Record<string, string | undefined>, name: string, problems: string[]): boolean {
  const raw = env[name];
  if (raw === undefined || raw === "" || raw === "false") return false;
  if (raw === "true") return true;
  problems.push(`${name} must be true or false, got "${raw}"`);
  return false;
}

/** Why `NODE_ENV=production` cannot use the embedded server (shared by config and every command). */
export const PRODUCTION_NEEDS_DATABASE_URL =
  "DATABASE_URL is required when NODE_ENV=production: the embedded PostgreSQL (postgres/postgres on 127.0.0.1, data in .data/) is for local development only";

/**
 * What is wrong with `NODE_ENV`, or undefined: it must be unset (or empty), `production`, `development`
 * or `test`. Anything else (`prod`, `Production`) is refused rather than read as development, which
 * would start the embedded database and the development secret where production was meant.
 */
export function nodeEnvProblem(env: Record<string, string | undefined>): string | undefined {
  const value = env.NODE_ENV;
  if (value === undefined || value === "" || value === "production" || value === "development" || value === "test") return undefined;
  return `NODE_ENV must be production, development or test (or unset), got "${value}"`;
}

/** `DATABASE_POOLER`: unset, `none` or `transaction` (a session pooler needs nothing: leave it unset). */
export function readPooler(env: Record<string, string | undefined>, problems: string[]): Pooler {
  const raw = env.DATABASE_POOLER || "none";
  if (raw === "none" || raw === "transaction") return raw;
  problems.push(`DATABASE_POOLER must be none or transaction, got "${raw}"`);
  return "none";
}

/** Default of `DATABASE_WAIT_MS`, ms: long enough for a database restart or a container coming up. */
export const DEFAULT_DATABASE_WAIT_MS = 60_000;

/**
 * `DATABASE_WAIT_MS`: how long a command waits at start for the database to answer, ms (default
 * {@link DEFAULT_DATABASE_WAIT_MS}; 0 tries once). Appends a problem naming the variable when it is not
 * a whole number ≥ 0.
 */
export function readDatabaseWaitMs(env: Record<string, string | undefined>, problems: string[]): number {
  const raw = env.DATABASE_WAIT_MS;
  if (raw === undefined || raw === "") return DEFAULT_DATABASE_WAIT_MS;
  const value = Number(raw);
  if (/^\d+$/.test(raw.trim()) && Number.isSafeInteger(value)) return value;
  problems.push(`DATABASE_WAIT_MS must be a whole number of milliseconds ≥ 0, got "${raw}"`);
  return DEFAULT_DATABASE_WAIT_MS;
}

/**
 * The endpoints whose rows the worker reads from the Stripe API before applying: `thin` (endpoints with
 * `STRIPE_ENDPOINT_KIND[_<NAME>]=thin`) and `refetch` (`INBOX_REFETCH[_<NAME>]=true`), over `billing` and
 * `STRIPE_ENDPOINTS`, without reading secrets (the worker has none). Values are checked as
 * {@link loadConfig} checks them; problems are appended naming the variable.
 */
export function readApiEndpoints(env: Record<string, string | undefined>, problems: string[]): { thin: Set<string>; refetch: Set<string> } {
  const thin = new Set<string>();
  const refetch = new Set<string>();
  const names = ["billing", ...commaList(env.STRIPE_ENDPOINTS)].filter((n) => ENDPOINT_NAME.test(n));
  for (const name of new Set(names)) {
    const suffix = name === "billing" ? "" : `_${name.toUpperCase().replaceAll("-", "_")}`;
    const read = readKind(env, suffix, () => "sync", problems);
    if (read.kind === "thin") thin.add(name);
    if (read.refetch) refetch.add(name);
  }
  return { thin, refetch };
}

/**
 * The one duration parser of settings and command lines: `30d`, `12h`, `90m`, `45s` or `500ms` (a
 * positive whole number and one of those units, surrounding spaces ignored) in milliseconds.
 * @throws Error naming the value when it is not one, or is longer than 100 years (PostgreSQL timestamps
 *   end in 294276 AD, but no retention needs more).
 */
export function parseDuration(text: string): number {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!match?.[1] || !match[2] || Number(match[1]) === 0)
    throw new Error(`Cannot read duration "${text}": use a positive whole number with ms, s, m, h or d (e.g. 30d)`);
  const ms = Number(match[1]) * { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] as "ms" | "s" | "m" | "h" | "d"];
  if (ms > 36_500 * 86_400_000) throw new Error(`Cannot read duration "${text}": longer than 100 years`);
  return ms;
}
