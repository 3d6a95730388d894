import { expect, test } from "bun:test";
import { ConfigError } from "../../src/config.ts";
import { startFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore } from "../../src/dev/fake-stripe/store.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { checkStripeApiKey, readStripeApiSettings, stripeApiClient } from "../../src/stripe-api/client.ts";
import { describeStripeFailure } from "../../src/stripe-api/describe-failure.ts";

test("`readStripeApiSettings()` takes a key and defaults the base to Stripe's API", () => {
  const s = readStripeApiSettings({ STRIPE_API_KEY: "rk_live_abcdefgh12345678" });
  expect(s.apiBase.href).toBe("https://api.stripe.com/");
  expect(readStripeApiSettings({ STRIPE_API_KEY: "sk_test_abcdefgh1", STRIPE_API_BASE: "http://127.0.0.1:12111" }).apiBase.port).toBe(
    "12111",
  );
});

test("`readStripeApiSettings()` refuses a missing or malformed key without quoting it, and a base with a path", () => {
  expect(() => readStripeApiSettings({})).toThrow(/STRIPE_API_KEY is required/);
  try {
    readStripeApiSettings({ STRIPE_API_KEY: "whsec_secretsecretsecret", STRIPE_API_BASE: "https://u:p@api.stripe.com/v1" });
    throw new Error("accepted");
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    const problems = (err as ConfigError).problems;
    expect(problems.length).toBe(3);
    expect(problems.join("\n")).not.toContain("secretsecret");
  }
});

test("`checkStripeApiKey()` reports an unreachable STRIPE_API_BASE as not fatal, naming its host:port, and a refused key as fatal, never quoting the key", async () => {
  const key = "sk_test_checkcheckcheck1";
  const port = await freePort(); // free a moment ago: nothing listens there
  const unreachable = new URL(`http://127.0.0.1:${port}`);
  expect(await checkStripeApiKey(stripeApiClient({ apiKey: key, apiBase: unreachable }), unreachable)).toEqual({
    fatal: false,
    message: `Cannot connect to the Stripe API at 127.0.0.1:${port} (STRIPE_API_BASE): connection refused (ECONNREFUSED)`,
  });
  const fake = startFakeStripe({ store: new FakeStripeStore(key) });
  try {
    const base = new URL(fake.url);
    expect(await checkStripeApiKey(stripeApiClient({ apiKey: key, apiBase: base }), base)).toBeUndefined();
    const refused = await checkStripeApiKey(stripeApiClient({ apiKey: "sk_test_otherotherother", apiBase: base }), base);
    expect(refused?.fatal).toBe(true);
    expect(refused?.message).toStartWith("Stripe refused STRIPE_API_KEY (401 Unauthorized)");
    expect(refused?.message).not.toContain("otherother");
  } finally {
    await fake.stop();
  }
});

test("`describeStripeFailure()` names the host:port with the HTTP status Stripe answered, and says nothing of errors that are not Stripe's", async () => {
  const key = "sk_test_describedescribe";
  const store = new FakeStripeStore(key);
  const fake = startFakeStripe({ store });
  try {
    const base = new URL(fake.url);
    store.failNext(1, 503, /^\/v1\/invoices$/);
    const failure = await stripeApiClient({ apiKey: key, apiBase: base })
      .invoices.list()
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(describeStripeFailure(failure, base)).toStartWith(`Stripe API at 127.0.0.1:${base.port} answered HTTP 503`);
    const https = new URL("https://api.stripe.com");
    expect(describeStripeFailure(Object.assign(new Error("x"), { type: "StripeConnectionError" }), https)).toBe(
      "Cannot connect to the Stripe API at api.stripe.com:443 (STRIPE_API_BASE): the connection failed",
    );
    expect(describeStripeFailure(new Error("relation does not exist"), base)).toBeUndefined();
  } finally {
    await fake.stop();
  }
});
