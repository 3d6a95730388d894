import { expect, test } from "bun:test";
import { ConfigError } from "../../src/config.ts";
import { readStripeApiSettings } from "../../src/stripe-api/client.ts";

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
