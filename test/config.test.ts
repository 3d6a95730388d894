import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig, loadEndpointsWithoutSecrets, parseDuration, readApiEndpoints } from "../src/config.ts";
import { reconcileEventsCommand } from "../src/reconcile/events-command.ts";
import { readSince } from "../src/reconcile/reconcile-args.ts";
import { readCatchUpSettings } from "../src/runtime/catch-up.ts";
import { readFailoverSettings } from "../src/runtime/failover.ts";
import { handlersFor, providerEndpoints } from "../src/receiver/endpoints.ts";
import { OTHER_SECRET, SECRET } from "./support/helpers.ts";

const DEV_SECRET = "whsec_dev_generated_0123456789abcdef";
const DB_URL = "postgres://app:pw@db.internal:5432/inbox";

/** The ConfigError that `env` must raise; fails the test if loadConfig accepts it. */
function configError(env: Record<string, string | undefined>, devSecret?: string): ConfigError {
  try {
    loadConfig(env, devSecret);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error(`loadConfig() accepted ${JSON.stringify(Object.keys(env))}`);
}

describe("loadConfig()", () => {
  test("`loadConfig()` fills every default from a minimal environment", () => {
    expect(loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET })).toEqual({
      port: 3000,
      host: "127.0.0.1",
      databaseUrl: undefined,
      databasePooler: "none",
      databaseWaitMs: 60000,
      toleranceSec: 300,
      maxBodyBytes: 1024 * 1024,
      maxInflightBodyBytes: 32 * 1024 * 1024,
      dbPoolMax: 10,
      queueTimeoutMs: 2000,
      statementTimeoutMs: 10000,
      hybridBudgetMs: 2000,
      metricsToken: undefined,
      endpoints: [{ name: "billing", secrets: [SECRET], source: "STRIPE_WEBHOOK_SECRET", mode: "sync" }],
      providerEndpoints: [],
      adminToken: undefined,
      adminReadonly: false,
    });
  });

  test("`loadConfig()` reads every variable and splits a rotating secret", () => {
    const config = loadConfig({
      PORT: "8080",
      HOST: "0.0.0.0",
      DATABASE_URL: DB_URL,
      STRIPE_TOLERANCE_SEC: "60",
      MAX_BODY_BYTES: "4096",
      MAX_INFLIGHT_BODY_BYTES: "65536",
      DB_POOL_MAX: "3",
      DATABASE_WAIT_MS: "0",
      METRICS_TOKEN: "metrics-token-0123456789",
      ADMIN_TOKEN: "admin-token-0123456789abcdefghijklmnop",
      ADMIN_READONLY: "true",
      STRIPE_WEBHOOK_SECRET: ` ${SECRET} , ${OTHER_SECRET} `,
    });
    expect(config).toEqual({
      port: 8080,
      host: "0.0.0.0",
      databaseUrl: DB_URL,
      databasePooler: "none",
      databaseWaitMs: 0,
      toleranceSec: 60,
      maxBodyBytes: 4096,
      maxInflightBodyBytes: 65536,
      dbPoolMax: 3,
      queueTimeoutMs: 2000,
      statementTimeoutMs: 10000,
      hybridBudgetMs: 2000,
      metricsToken: "metrics-token-0123456789",
      endpoints: [{ name: "billing", secrets: [SECRET, OTHER_SECRET], source: "STRIPE_WEBHOOK_SECRET", mode: "sync" }],
      providerEndpoints: [],
      adminToken: "admin-token-0123456789abcdefghijklmnop",
      adminReadonly: true,
    });
  });

  test("`loadConfig()` refuses a long ADMIN_TOKEN made of whitespace or of few characters, without echoing it", () => {
    for (const token of [" ".repeat(34), "a".repeat(40), "abababababababababababababababab\t"]) {
      const problems = configError({ STRIPE_WEBHOOK_SECRET: SECRET, ADMIN_TOKEN: token }).problems;
      expect(problems).toEqual([
        "ADMIN_TOKEN must not contain whitespace and needs at least 10 different characters (e.g. openssl rand -hex 32)",
      ]);
    }
  });

  test("`loadConfig()` refuses an ADMIN_TOKEN under 32 characters and an ADMIN_READONLY that is not true or false, without echoing the token", () => {
    const problems = configError({ STRIPE_WEBHOOK_SECRET: SECRET, ADMIN_TOKEN: "short-admin-token", ADMIN_READONLY: "yes" }).problems;
    expect(problems).toEqual(['ADMIN_READONLY must be true or false, got "yes"', "ADMIN_TOKEN must be at least 32 characters"]);
  });

  test("`loadConfig()` refuses MAX_INFLIGHT_BODY_BYTES below MAX_BODY_BYTES", () => {
    expect(configError({ STRIPE_WEBHOOK_SECRET: SECRET, MAX_BODY_BYTES: "8192", MAX_INFLIGHT_BODY_BYTES: "4096" }).problems).toEqual([
      "MAX_INFLIGHT_BODY_BYTES (4096) must be at least MAX_BODY_BYTES (8192), or no body of the largest size could ever be read",
    ]);
  });

  test("`loadConfig()` reads DATABASE_POOLER=transaction and refuses other poolers", () => {
    expect(loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET, DATABASE_URL: DB_URL, DATABASE_POOLER: "transaction" }).databasePooler).toBe(
      "transaction",
    );
    expect(loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET, DATABASE_POOLER: "none" }).databasePooler).toBe("none");
    expect(loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET, DATABASE_POOLER: "" }).databasePooler).toBe("none");
    expect(configError({ STRIPE_WEBHOOK_SECRET: SECRET, DATABASE_POOLER: "statement" }).problems).toEqual([
      'DATABASE_POOLER must be none or transaction, got "statement"',
    ]);
  });

  test("`loadConfig()` refuses a DATABASE_WAIT_MS that is not a whole number of ms", () => {
    expect(configError({ STRIPE_WEBHOOK_SECRET: SECRET, DATABASE_WAIT_MS: "5s" }).problems).toEqual([
      'DATABASE_WAIT_MS must be a whole number of milliseconds ≥ 0, got "5s"',
    ]);
    expect(configError({ STRIPE_WEBHOOK_SECRET: SECRET, DATABASE_WAIT_MS: "-1" }).problems).toEqual([
      'DATABASE_WAIT_MS must be a whole number of milliseconds ≥ 0, got "-1"',
    ]);
  });

  test("`loadConfig()` treats empty strings as unset", () => {
    const config = loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET, PORT: "", STRIPE_TOLERANCE_SEC: "", DATABASE_URL: "", HOST: "" });
    expect([config.port, config.toleranceSec, config.databaseUrl, config.host]).toEqual([3000, 300, undefined, "127.0.0.1"]);
  });

  test("`loadConfig()` lists every problem at once in one ConfigError", () => {
    const err = configError({
      PORT: "abc",
      STRIPE_TOLERANCE_SEC: "0",
      MAX_BODY_BYTES: "10",
      DB_POOL_MAX: "0",
      DATABASE_URL: "mysql://db.internal/inbox",
      STRIPE_WEBHOOK_SECRET: "whsec_short",
      STRIPE_ENDPOINTS: "analytics,Bad_Name",
    });
    const expected = [
      /^PORT must be an integer from 0 to 65535, got "abc"$/,
      /^STRIPE_TOLERANCE_SEC must be an integer from 1 to 3600, got "0"$/,
      /^MAX_BODY_BYTES must be an integer ≥ 1024, got "10"$/,
      /^DB_POOL_MAX must be an integer ≥ 1, got "0"$/,
      /^DATABASE_URL must start with postgres:\/\//,
      /^STRIPE_WEBHOOK_SECRET value 1 of 1 is not a whsec_… secret \(whsec_ followed by at least 16 characters of A–Z, a–z, 0–9, \+\/=_-\)$/,
      /^STRIPE_WEBHOOK_SECRET_ANALYTICS is required/,
      /^STRIPE_ENDPOINTS entry "Bad_Name" must match/,
    ];
    expect(err.problems).toHaveLength(expected.length);
    for (const pattern of expected) expect(err.problems.some((p) => pattern.test(p))).toBe(true);
    expect(err.message.startsWith("Invalid configuration:\n- ")).toBe(true);
    for (const problem of err.problems) expect(err.message).toContain(problem);
  });

  test.each(["abc", "-1", "80.5", "1e400"])("`loadConfig()` refuses PORT=%s", (port) => {
    const err = configError({ STRIPE_WEBHOOK_SECRET: SECRET, PORT: port });
    expect(err.problems).toEqual([`PORT must be an integer from 0 to 65535, got "${port}"`]);
  });

  test("`loadConfig()` refuses a STRIPE_TOLERANCE_SEC above one hour (it would all but switch replay protection off)", () => {
    expect(configError({ STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_TOLERANCE_SEC: "99999999999999" }).problems).toEqual([
      'STRIPE_TOLERANCE_SEC must be an integer from 1 to 3600, got "99999999999999"',
    ]);
    expect(loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_TOLERANCE_SEC: "3600" }).toleranceSec).toBe(3600);
  });

  test.each(["STATEMENT_TIMEOUT_MS", "QUEUE_TIMEOUT_MS", "HYBRID_BUDGET_MS"])(
    "`loadConfig()` refuses %s above 10 minutes (a JavaScript timer above 2^31 − 1 ms fires at once)",
    (name) => {
      expect(configError({ STRIPE_WEBHOOK_SECRET: SECRET, [name]: "2147483647" }).problems).toEqual([
        `${name} must be an integer from 1 to 600000, got "2147483647"`,
      ]);
      expect(loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET, [name]: "600000" })).toBeDefined();
    },
  );

  test("`loadConfig()` refuses a PORT above 65535", () => {
    const err = configError({ STRIPE_WEBHOOK_SECRET: SECRET, PORT: "70000" });
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]).toContain("PORT");
  });

  test.each(["0", "-5", "-300", "2.5"])("`loadConfig()` refuses STRIPE_TOLERANCE_SEC=%s", (tolerance) => {
    const err = configError({ STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_TOLERANCE_SEC: tolerance });
    expect(err.problems).toEqual([`STRIPE_TOLERANCE_SEC must be an integer from 1 to 3600, got "${tolerance}"`]);
  });

  test.each([
    ["not a whsec_ secret", "sk_live_abcdefghijklmnopqrstuvwxyz"],
    ["too short", "whsec_abc"],
    ["with a space inside", "whsec_abcdefgh ijklmnopqrstuvwx"],
  ])("`loadConfig()` refuses a STRIPE_WEBHOOK_SECRET that is %s", (_label, secret) => {
    const err = configError({ STRIPE_WEBHOOK_SECRET: secret });
    expect(err.problems).toEqual([
      "STRIPE_WEBHOOK_SECRET value 1 of 1 is not a whsec_… secret (whsec_ followed by at least 16 characters of A–Z, a–z, 0–9, +/=_-)",
    ]);
  });

  test("`loadConfig()` names the bad value of a rotating secret by position", () => {
    const err = configError({ STRIPE_WEBHOOK_SECRET: `${SECRET},whsec_bad` });
    expect(err.problems).toEqual([
      "STRIPE_WEBHOOK_SECRET value 2 of 2 is not a whsec_… secret (whsec_ followed by at least 16 characters of A–Z, a–z, 0–9, +/=_-)",
    ]);
  });

  test("`loadConfig()` requires STRIPE_WEBHOOK_SECRET with DATABASE_URL and names the variable", () => {
    for (const dev of [undefined, DEV_SECRET]) {
      const err = configError({ DATABASE_URL: DB_URL }, dev);
      expect(err.problems).toHaveLength(1);
      expect(err.problems[0]).toStartWith("STRIPE_WEBHOOK_SECRET is required");
      expect(err.message).not.toContain(DEV_SECRET);
    }
  });

  test("`loadConfig()` adds STRIPE_ENDPOINTS with their own STRIPE_WEBHOOK_SECRET_<NAME>", () => {
    const config = loadConfig({
      STRIPE_WEBHOOK_SECRET: SECRET,
      STRIPE_ENDPOINTS: " analytics , ops-eu ",
      STRIPE_WEBHOOK_SECRET_ANALYTICS: OTHER_SECRET,
      STRIPE_WEBHOOK_SECRET_OPS_EU: `${OTHER_SECRET},${SECRET}`,
    });
    expect(config.endpoints).toEqual([
      { name: "billing", secrets: [SECRET], source: "STRIPE_WEBHOOK_SECRET", mode: "sync" },
      { name: "analytics", secrets: [OTHER_SECRET], source: "STRIPE_WEBHOOK_SECRET_ANALYTICS", mode: "sync" },
      { name: "ops-eu", secrets: [OTHER_SECRET, SECRET], source: "STRIPE_WEBHOOK_SECRET_OPS_EU", mode: "sync" },
    ]);
  });

  test("`loadConfig()` names the missing secret variable of an extra endpoint", () => {
    const err = configError({ STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_ENDPOINTS: "ops-eu" });
    expect(err.problems).toEqual(["STRIPE_WEBHOOK_SECRET_OPS_EU is required (the ops-eu endpoint's whsec_… signing secret)"]);
  });

  test("`loadConfig()` refuses a name repeated in STRIPE_ENDPOINTS, billing included", () => {
    const err = configError({
      STRIPE_WEBHOOK_SECRET: SECRET,
      STRIPE_ENDPOINTS: "analytics,billing,analytics",
      STRIPE_WEBHOOK_SECRET_ANALYTICS: OTHER_SECRET,
    });
    expect(err.problems).toEqual(['STRIPE_ENDPOINTS names "billing" twice', 'STRIPE_ENDPOINTS names "analytics" twice']);
  });

  test("`loadConfig()` reports a repeated endpoint name as repeated even when its secret is missing", () => {
    const err = configError({ STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_ENDPOINTS: "ops-eu,ops-eu" });
    expect(err.problems).toEqual([
      "STRIPE_WEBHOOK_SECRET_OPS_EU is required (the ops-eu endpoint's whsec_… signing secret)",
      'STRIPE_ENDPOINTS names "ops-eu" twice',
    ]);
  });

  test("`loadConfig()` uses the dev secret for billing only without DATABASE_URL and STRIPE_WEBHOOK_SECRET", () => {
    expect(loadConfig({}, DEV_SECRET).endpoints).toEqual([{ name: "billing", secrets: [DEV_SECRET], source: "generated", mode: "sync" }]);
    expect(loadConfig({ STRIPE_WEBHOOK_SECRET: SECRET }, DEV_SECRET).endpoints).toEqual([
      { name: "billing", secrets: [SECRET], source: "STRIPE_WEBHOOK_SECRET", mode: "sync" },
    ]);
    expect(configError({}).problems[0]).toStartWith("STRIPE_WEBHOOK_SECRET is required");
    // Extra endpoints never fall back to the dev secret.
    const err = configError({ STRIPE_ENDPOINTS: "analytics" }, DEV_SECRET);
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]).toStartWith("STRIPE_WEBHOOK_SECRET_ANALYTICS is required");
  });

  test("`loadConfig()` messages never contain secret values or the database password", () => {
    const secrets = [
      "whsec_live_goodsecret0123456789AB",
      "sk_live_verysecretapikey0123456789",
      "whsec_tiny",
      "whsec_has space in it 0123456789",
    ];
    const err = configError(
      {
        DATABASE_URL: "mysql://admin:hunter2-db-password@db.internal/inbox",
        STRIPE_WEBHOOK_SECRET: `${secrets[0]},${secrets[1]}`,
        STRIPE_ENDPOINTS: "analytics,ops",
        STRIPE_WEBHOOK_SECRET_ANALYTICS: secrets[2],
        STRIPE_WEBHOOK_SECRET_OPS: secrets[3],
      },
      DEV_SECRET,
    );
    expect(err.problems).toHaveLength(4);
    const text = `${err.message}\n${err.problems.join("\n")}\n${String(err)}`;
    for (const value of [...secrets, "hunter2-db-password", DEV_SECRET]) expect(text).not.toContain(value);
  });

  test("`loadConfig()` refuses a DATABASE_URL postgres.js cannot read (an unencoded / or a bad % in the password) without quoting it", () => {
    for (const url of [
      "postgres://app:SEC/RET-pw@db.internal:5432/inbox",
      "postgres://app:hun%zzter2@db.internal/inbox",
      "postgres://user:p@ss#word@127.0.0.1:5432/db",
    ]) {
      const err = configError({ DATABASE_URL: url, STRIPE_WEBHOOK_SECRET: SECRET });
      expect(err.problems).toHaveLength(1);
      expect(err.problems[0]).toStartWith("DATABASE_URL ");
      expect(err.problems[0]).toContain("(value not shown)");
      for (const piece of ["RET-pw", "hun%zz", "ss#", "@ss", "ENOTFOUND"]) expect(String(err)).not.toContain(piece);
    }
    expect(() =>
      loadConfig({ DATABASE_URL: "postgres://app:SEC%2FRET-pw@db.internal:5432/inbox", STRIPE_WEBHOOK_SECRET: SECRET }),
    ).not.toThrow();
  });

  test("`loadConfig()` with NODE_ENV=production and no settings names DATABASE_URL, STRIPE_WEBHOOK_SECRET and STRIPE_MODE at once", () => {
    const err = configError({ NODE_ENV: "production" }, DEV_SECRET);
    expect(err.problems).toHaveLength(3);
    expect(err.problems.find((p) => p.startsWith("DATABASE_URL is required when NODE_ENV=production"))).toBeDefined();
    expect(err.problems.find((p) => p.startsWith("STRIPE_WEBHOOK_SECRET is required"))).toBeDefined();
    expect(err.problems.find((p) => p.startsWith("NODE_ENV=production needs a mode: set STRIPE_MODE=live or test"))).toBeDefined();
    expect(err.message).not.toContain(DEV_SECRET);
  });

  test("`loadConfig()` with NODE_ENV=production refuses every Stripe endpoint without a mode, naming its STRIPE_MODE variable (the trial's N3)", () => {
    const env = {
      NODE_ENV: "production",
      DATABASE_URL: DB_URL,
      STRIPE_WEBHOOK_SECRET: SECRET,
      STRIPE_ENDPOINTS: "money",
      STRIPE_WEBHOOK_SECRET_MONEY: OTHER_SECRET,
    };
    const why = "(or a STRIPE_API_KEY sk_live_/sk_test_): without one, test-mode events are booked as well";
    expect(configError(env).problems).toEqual([
      `NODE_ENV=production needs a mode: set STRIPE_MODE=live or test ${why}`,
      `NODE_ENV=production needs a mode: set STRIPE_MODE_MONEY=live or test ${why}`,
    ]);
    expect(configError({ ...env, STRIPE_MODE: "live" }).problems).toEqual([
      `NODE_ENV=production needs a mode: set STRIPE_MODE_MONEY=live or test ${why}`,
    ]);
    expect(loadConfig({ ...env, STRIPE_MODE: "live", STRIPE_MODE_MONEY: "test" }).endpoints.map((e) => e.livemode)).toEqual([true, false]);
    // A key gives every endpoint its mode; outside production an endpoint without one still starts.
    expect(loadConfig({ ...env, STRIPE_API_KEY: "rk_live_0123456789abcdef" }).endpoints.map((e) => e.livemode)).toEqual([true, true]);
    expect(loadConfig({ ...env, NODE_ENV: undefined }).endpoints.map((e) => e.livemode)).toEqual([undefined, undefined]);
  });

  test("`loadConfig()` refuses an unknown NODE_ENV naming the variable, and accepts production, development, test or unset", () => {
    for (const value of ["prod", "Production", "staging"]) {
      expect(configError({ NODE_ENV: value, STRIPE_WEBHOOK_SECRET: SECRET }).problems).toEqual([
        `NODE_ENV must be production, development or test (or unset), got "${value}"`,
      ]);
    }
    for (const value of ["development", "test", "", undefined])
      expect(loadConfig({ NODE_ENV: value }, DEV_SECRET).endpoints[0]?.source).toBe("generated");
    expect(
      loadConfig({ NODE_ENV: "production", DATABASE_URL: DB_URL, STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_MODE: "live" }).databaseUrl,
    ).toBe(DB_URL);
  });

  test("`loadConfig()` does not echo a STRIPE_ENDPOINTS entry that looks like a secret pasted there by mistake", () => {
    const err = configError({ STRIPE_ENDPOINTS: "ops,whsec_leakedSecretValue1234567" });
    expect(err.problems).toContain(
      "STRIPE_ENDPOINTS entry number 2 (not shown: it looks like a secret or is too long) must match ^[a-z][a-z0-9-]{0,62}$",
    );
    expect(String(err) + err.problems.join("\n")).not.toContain("leakedSecretValue");
  });
});

describe("endpoint kinds and refetch mode", () => {
  const base = {
    STRIPE_WEBHOOK_SECRET: SECRET,
    STRIPE_ENDPOINTS: "events-thin,ops",
    STRIPE_WEBHOOK_SECRET_EVENTS_THIN: OTHER_SECRET,
    STRIPE_WEBHOOK_SECRET_OPS: OTHER_SECRET,
  };

  test("`loadConfig()` reads a thin endpoint (async by nature) and a classic endpoint in refetch mode (async)", () => {
    const config = loadConfig({ ...base, STRIPE_ENDPOINT_KIND_EVENTS_THIN: "thin", INBOX_REFETCH_OPS: "true" });
    expect(config.endpoints).toEqual([
      { name: "billing", secrets: [SECRET], source: "STRIPE_WEBHOOK_SECRET", mode: "sync" },
      { name: "events-thin", secrets: [OTHER_SECRET], source: "STRIPE_WEBHOOK_SECRET_EVENTS_THIN", mode: "async", kind: "thin" },
      { name: "ops", secrets: [OTHER_SECRET], source: "STRIPE_WEBHOOK_SECRET_OPS", mode: "async", refetch: true },
    ]);
    expect(loadConfig({ ...base, STRIPE_ENDPOINT_KIND_EVENTS_THIN: "thin", INBOX_MODE_EVENTS_THIN: "async" }).endpoints[1]?.mode).toBe(
      "async",
    );
  });

  test("`loadConfig()` refuses an unknown kind, a refetch value that is not true/false, sync or hybrid with thin or refetch, and refetch on a thin endpoint", () => {
    expect(
      configError({
        ...base,
        STRIPE_ENDPOINT_KIND: "thinn",
        INBOX_REFETCH: "yes",
        STRIPE_ENDPOINT_KIND_EVENTS_THIN: "thin",
        INBOX_MODE_EVENTS_THIN: "sync",
        INBOX_REFETCH_OPS: "true",
        INBOX_MODE_OPS: "hybrid",
      }).problems,
    ).toEqual([
      'STRIPE_ENDPOINT_KIND must be classic or thin, got "thinn"',
      'INBOX_REFETCH must be true or false, got "yes"',
      'INBOX_MODE_EVENTS_THIN must be async (or unset) with STRIPE_ENDPOINT_KIND_EVENTS_THIN=thin: the worker reads the Stripe API before applying, never the request; got "sync"',
      'INBOX_MODE_OPS must be async (or unset) with INBOX_REFETCH_OPS=true: the worker reads the Stripe API before applying, never the request; got "hybrid"',
    ]);
    expect(configError({ ...base, STRIPE_ENDPOINT_KIND_OPS: "thin", INBOX_REFETCH_OPS: "true" }).problems).toEqual([
      "INBOX_REFETCH_OPS applies to classic endpoints only: a thin endpoint (STRIPE_ENDPOINT_KIND_OPS=thin) always reads the current object",
    ]);
  });

  test("`readApiEndpoints()` finds thin and refetch endpoints without any secret", () => {
    const problems: string[] = [];
    const found = readApiEndpoints(
      { STRIPE_ENDPOINTS: "events-thin,ops", STRIPE_ENDPOINT_KIND_EVENTS_THIN: "thin", INBOX_REFETCH: "true" },
      problems,
    );
    expect({ thin: [...found.thin], refetch: [...found.refetch], problems }).toEqual({
      thin: ["events-thin"],
      refetch: ["billing"],
      problems: [],
    });
  });

  test("`loadEndpointsWithoutSecrets()` reads every endpoint with DATABASE_URL and no signing secret, and still lists bad settings", () => {
    const env = { DATABASE_URL: "postgres://u:p@db.example:5432/inbox", STRIPE_ENDPOINTS: "events-thin,ops", INBOX_MODE: "hybrid" };
    expect(loadEndpointsWithoutSecrets({ ...env, STRIPE_ENDPOINT_KIND_EVENTS_THIN: "thin" })).toEqual([
      { name: "billing", secrets: [], source: "unused", mode: "hybrid" },
      { name: "events-thin", secrets: [], source: "unused", mode: "async", kind: "thin" },
      { name: "ops", secrets: [], source: "unused", mode: "sync" },
    ]);
    let thrown: unknown;
    try {
      loadEndpointsWithoutSecrets({ ...env, INBOX_MODE_OPS: "fast", STRIPE_ENDPOINTS: "ops,Bad" });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).problems).toEqual([
      'INBOX_MODE_OPS must be sync, async or hybrid, got "fast"',
      'STRIPE_ENDPOINTS entry "Bad" must match ^[a-z][a-z0-9-]{0,62}$',
    ]);
  });
});

describe("WEBHOOK_ENDPOINTS", () => {
  test("`loadConfig()` reads <provider>/<name> endpoints with their rotating secrets, mode and tolerance; `providerEndpoints()` wires them", () => {
    const config = loadConfig({
      STRIPE_WEBHOOK_SECRET: SECRET,
      WEBHOOK_ENDPOINTS: "github/repos, paddle/billing",
      WEBHOOK_SECRET_GITHUB_REPOS: "one-secret-0123456, two-secret-0123456",
      WEBHOOK_SECRET_PADDLE_BILLING: "pdl_ntfset_secret",
      INBOX_MODE_PADDLE_BILLING: "hybrid",
      WEBHOOK_TOLERANCE_SEC_PADDLE_BILLING: "30",
    });
    expect(config.providerEndpoints).toEqual([
      {
        provider: "github",
        name: "repos",
        secrets: ["one-secret-0123456", "two-secret-0123456"],
        source: "WEBHOOK_SECRET_GITHUB_REPOS",
        mode: "sync",
      },
      {
        provider: "paddle",
        name: "billing",
        secrets: ["pdl_ntfset_secret"],
        source: "WEBHOOK_SECRET_PADDLE_BILLING",
        mode: "hybrid",
        toleranceSec: 30,
      },
    ]);
    const endpoints = providerEndpoints(config.providerEndpoints);
    expect(
      endpoints.map((e) => [e.provider.name, e.name, e.mode, e.isDefault, e.toleranceSec, e.handlers === handlersFor(e.provider.name)]),
    ).toEqual([
      ["github", "repos", "sync", true, undefined, true],
      ["paddle", "billing", "hybrid", true, 30, true],
    ]);
  });

  test("`loadConfig()` and `providerEndpoints()` refuse bad entries, missing secrets and unknown providers, never echoing a secret", () => {
    const err = configError({
      STRIPE_WEBHOOK_SECRET: SECRET,
      WEBHOOK_ENDPOINTS: "github,stripe/x,shopify/shop,shopify/shop,paddle/b,github/short",
      WEBHOOK_SECRET_PADDLE_B: "pdl_ntfset_secret00",
      WEBHOOK_SECRET_GITHUB_SHORT: "x,0123456789abcdef",
      INBOX_MODE_PADDLE_B: "later",
      WEBHOOK_TOLERANCE_SEC_PADDLE_B: "0",
    });
    expect(err.problems).toEqual([
      'WEBHOOK_ENDPOINTS entry "github" must be <provider>/<name>, each matching ^[a-z][a-z0-9-]{0,62}$',
      'WEBHOOK_ENDPOINTS entry "stripe/x": Stripe endpoints are configured by STRIPE_ENDPOINTS and STRIPE_WEBHOOK_SECRET_<NAME>',
      "WEBHOOK_SECRET_SHOPIFY_SHOP is required (the shopify/shop endpoint's signing secret)",
      'WEBHOOK_ENDPOINTS names "shopify/shop" twice (or two entries share the variables\' suffix _SHOPIFY_SHOP)',
      'INBOX_MODE_PADDLE_B must be sync, async or hybrid, got "later"',
      'WEBHOOK_TOLERANCE_SEC_PADDLE_B must be an integer from 1 to 3600, got "0"',
      "WEBHOOK_SECRET_GITHUB_SHORT: each secret must be at least 16 characters (a short secret can be guessed; use a random one)",
    ]);
    const wiring = (() => {
      try {
        providerEndpoints([
          { provider: "acme", name: "x", secrets: ["s"], source: "WEBHOOK_SECRET_ACME_X", mode: "sync" },
          { provider: "adyen", name: "pay", secrets: ["whsec_not_hex_secret"], source: "WEBHOOK_SECRET_ADYEN_PAY", mode: "sync" },
        ]);
      } catch (e) {
        return e as ConfigError;
      }
      throw new Error("providerEndpoints() accepted them");
    })();
    expect(wiring.problems).toEqual([
      'WEBHOOK_ENDPOINTS entry "acme/x": no provider named "acme" is registered (src/providers/registry.ts)',
      "WEBHOOK_SECRET_ADYEN_PAY value 1 of 1 is not an Adyen HMAC key (an even number of hex digits, at least 32, as the Customer Area shows it)",
    ]);
    expect(JSON.stringify(wiring.problems)).not.toContain("whsec_not_hex_secret");
  });
});

test("`loadConfig()` refuses a per-endpoint variable whose suffix names no endpoint (a misspelt STRIPE_MODE_<NAME> would leave that endpoint open to both modes)", () => {
  const env = {
    STRIPE_WEBHOOK_SECRET: SECRET,
    STRIPE_ENDPOINTS: "connect",
    STRIPE_WEBHOOK_SECRET_CONNECT: SECRET,
    STRIPE_MODE_CONECT: "live",
    INBOX_MODE_CONECT: "async",
    WEBHOOK_ENDPOINTS: "paddle/billing",
    WEBHOOK_SECRET_PADDLE_BILLING: "pdl_ntfset_0123456789abcdef",
    INBOX_MODE_PADDLE_BILLING: "hybrid",
  };
  const error = (() => {
    try {
      loadConfig(env);
    } catch (err) {
      return err as ConfigError;
    }
  })();
  expect(error?.problems).toEqual([
    "INBOX_MODE_CONECT names no configured endpoint (the Stripe endpoints are billing, connect; add it to STRIPE_ENDPOINTS or fix the name)",
    "STRIPE_MODE_CONECT names no configured endpoint (the Stripe endpoints are billing, connect; add it to STRIPE_ENDPOINTS or fix the name)",
  ]);
  expect(() => loadConfig({ ...env, STRIPE_MODE_CONECT: undefined, INBOX_MODE_CONECT: undefined })).not.toThrow();
});

test("`loadConfig()` refuses INBOX_MODE_BILLING by naming the billing endpoint's own variable, INBOX_MODE (the fresh-user trial)", () => {
  const error = (() => {
    try {
      loadConfig({ DATABASE_URL: DB_URL, STRIPE_WEBHOOK_SECRET: SECRET, INBOX_MODE_BILLING: "async" });
    } catch (err) {
      return err as ConfigError;
    }
  })();
  expect(error?.problems).toEqual(["INBOX_MODE_BILLING: the billing endpoint's variable is INBOX_MODE, without a suffix"]);
});

describe("parseDuration()", () => {
  // Every option and setting that takes a duration, as a function: ms, or undefined when refused.
  const now = new Date("2026-12-01T00:00:00Z");
  const key = "sk_test_0123456789abcdef";
  const eventsOption = async (flag: string, value: string) => {
    const code = await reconcileEventsCommand(
      [flag, value, "--help"],
      {},
      { openDb: () => Promise.reject(new Error("no db")), out: () => {}, err: () => {} },
    );
    return code === 0 ? "accepted" : undefined;
  };
  const readers: Record<string, (text: string) => unknown> = {
    parseDuration: (t) => parseDuration(t),
    "reconcile invoices --since": (t) => now.getTime() - readSince(t, now).getTime(),
    RECONCILE_EVERY: (t) => readCatchUpSettings({ RECONCILE_EVERY: t, STRIPE_API_KEY: key }).everyMs,
    FAILOVER_BACKFILL_MARGIN: (t) => readFailoverSettings({ FAILOVER_BACKFILL_MARGIN: t }).marginMs,
  };
  const read = async (text: string) => {
    const results: Record<string, unknown> = {};
    for (const [name, reader] of Object.entries(readers))
      try {
        results[name] = reader(text);
      } catch {
        results[name] = undefined;
      }
    results["reconcile events --since"] = await eventsOption("--since", text);
    results["reconcile events --every"] = await eventsOption("--every", text);
    return results;
  };

  test("`parseDuration()` is the one reading of a duration: every option and setting that takes one accepts the same spellings as the same ms", async () => {
    for (const [text, ms] of [
      ["30d", 30 * 86_400_000],
      ["12h", 12 * 3_600_000],
      ["90m", 90 * 60_000],
      ["45s", 45_000],
      ["500ms", 500],
      [" 15m ", 900_000],
    ] as const) {
      const each: Record<string, unknown> = { parseDuration: ms, "reconcile invoices --since": ms, RECONCILE_EVERY: ms };
      Object.assign(each, { FAILOVER_BACKFILL_MARGIN: ms, "reconcile events --since": "accepted", "reconcile events --every": "accepted" });
      expect({ text, ...(await read(text)) }).toEqual({ text, ...each });
    }
  });

  test("`parseDuration()` is the one reading of a duration: every option and setting refuses zero, a bare number, a fraction, a sign, an unknown unit and more than 100 years", async () => {
    for (const text of ["0d", "0ms", "30", "1.5h", "-1d", "+1d", "3w", "1 d", "36501d", ""]) {
      const results = await read(text);
      // An empty setting means unset (its default), as for every variable; an empty option is refused.
      if (text === "") Object.assign(results, { RECONCILE_EVERY: undefined, FAILOVER_BACKFILL_MARGIN: undefined });
      expect({ text, accepted: Object.entries(results).filter(([, v]) => v !== undefined) }).toEqual({ text, accepted: [] });
    }
  });
});
