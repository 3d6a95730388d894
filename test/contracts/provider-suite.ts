// The checks every webhook provider must pass (after stripe-node's `createCryptoProviderTestSuite`):
// a provider is done when its test file calls `providerContractSuite` and it is green. Each check
// calls `provider.verify` directly with an injected clock; nothing here touches the database.
import { describe, expect, test } from "bun:test";
import { AppError, errorResponse, PermanentError, type ErrorCode } from "../../src/errors.ts";
import type { Subject, VerifiedEvent, WebhookProvider } from "../../src/providers/provider.ts";
import { providerNamed } from "../../src/providers/registry.ts";

/** Signs `body` with `secret` at `timestampSec` (unix seconds) as the provider would; returns the request headers. */
export type TestSigner = (body: string, secret: string, timestampSec: number) => Promise<Record<string, string>>;

/** What {@link providerContractSuite} needs to know about one provider. */
export interface ProviderSuiteOptions {
  provider: WebhookProvider;
  sign: TestSigner;
  /** Two valid secrets of the provider's format (the second plays the rotated-in one). */
  secrets: readonly [string, string];
  /** A valid event body and what `verify` must read from it when signed by `sign`. */
  sample: { body: string; id: string; type: string; subject: Subject };
  /** Headers whose absence alone must be `signature_missing`. */
  requiredHeaders: readonly string[];
  /** Variants of a validly signed delivery's headers that must each be `signature_malformed`. */
  malformed: (headers: Record<string, string>) => Record<string, string>[];
  /** JSON bodies that, validly signed, are not events of this provider: each `invalid_event`. */
  notEvents: readonly string[];
  /**
   * A stored payload without a subject: `subject` must throw PermanentError. Omitted for a provider
   * whose every payload is its own subject (GitHub, Shopify: no envelope).
   */
  withoutSubject?: Record<string, unknown>;
  /**
   * False for a scheme that signs no timestamp (GitHub, Shopify, Adyen): the tolerance checks are
   * replaced by one showing that the same signature is accepted whatever the clock says. Default true.
   */
  timestamped?: boolean;
}

const NOW_MS = 1_764_461_520_000;
const NOW_SEC = NOW_MS / 1000;
const TOLERANCE_SEC = 300;

/** Registers the provider contract tests for `options.provider` in the calling test file. */
export function providerContractSuite(options: ProviderSuiteOptions): void {
  const { provider, sign, secrets, sample } = options;
  const verify = async (
    body: string,
    headers: Record<string, string>,
    endpointSecrets: readonly string[] = [secrets[0]],
  ): Promise<VerifiedEvent> =>
    provider.verify({ body, headers: new Headers(headers), secrets: endpointSecrets, toleranceSec: TOLERANCE_SEC, nowMs: NOW_MS });
  const refused = async (run: Promise<unknown>, code: ErrorCode): Promise<void> => {
    const err = await run.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AppError);
    expect({ code: (err as AppError).code, status: (err as AppError).status }).toEqual({ code, status: 400 });
  };

  describe(`provider contract: ${provider.name}`, () => {
    test("`providerNamed()` finds the provider by the name its rows are stored under", () => {
      expect(providerNamed(provider.name)).toBe(provider);
    });

    test("`verify()` returns the event's id, type, payload, subject and exact body for a valid signature", async () => {
      const event = await verify(sample.body, await sign(sample.body, secrets[0], NOW_SEC));
      expect({ id: event.id, type: event.type, subject: event.subject, body: event.body }).toEqual({
        id: sample.id,
        type: sample.type,
        subject: sample.subject,
        body: sample.body,
      });
      expect(provider.subject(event.payload)).toEqual(sample.subject);
    });

    test("`verify()` refuses a tampered body as signature_mismatch", async () => {
      const headers = await sign(sample.body, secrets[0], NOW_SEC);
      await refused(verify(`${sample.body} `, headers), "signature_mismatch");
      // The type when the body holds it, else one letter: GitHub and Shopify name the type in a header.
      const changed = sample.body.includes(sample.type)
        ? sample.body.replace(sample.type, `${sample.type}x`)
        : sample.body.replace(/[a-z]/, (c) => (c === "a" ? "b" : "a"));
      await refused(verify(changed, headers), "signature_mismatch");
    });

    test("`verify()` refuses a signature made with another secret as signature_mismatch", async () => {
      await refused(verify(sample.body, await sign(sample.body, secrets[1], NOW_SEC)), "signature_mismatch");
    });

    test("`verify()` accepts a signature matching the second of two secrets (a rotation)", async () => {
      const event = await verify(sample.body, await sign(sample.body, secrets[1], NOW_SEC), secrets);
      expect(event.id).toBe(sample.id);
    });

    if (options.timestamped === false) {
      test("`verify()` reads no timestamp: the same signature is accepted an hour before and after", async () => {
        const headers = await sign(sample.body, secrets[0], NOW_SEC);
        for (const nowMs of [NOW_MS - 3_600_000, NOW_MS + 3_600_000]) {
          const event = await provider.verify({
            body: sample.body,
            headers: new Headers(headers),
            secrets: [secrets[0]],
            toleranceSec: 1,
            nowMs,
          });
          expect(event.id).toBe(sample.id);
        }
      });
    }

    if (options.timestamped !== false)
      test("`verify()` accepts a timestamp exactly at the tolerance, old or in the future", async () => {
        for (const at of [NOW_SEC - TOLERANCE_SEC, NOW_SEC + TOLERANCE_SEC]) {
          expect((await verify(sample.body, await sign(sample.body, secrets[0], at))).id).toBe(sample.id);
        }
      });

    if (options.timestamped !== false)
      test("`verify()` refuses a stale timestamp beyond the tolerance as timestamp_out_of_tolerance", async () => {
        await refused(verify(sample.body, await sign(sample.body, secrets[0], NOW_SEC - TOLERANCE_SEC - 1)), "timestamp_out_of_tolerance");
      });

    if (options.timestamped !== false)
      test("`verify()` refuses a future timestamp beyond the tolerance as timestamp_out_of_tolerance", async () => {
        await refused(verify(sample.body, await sign(sample.body, secrets[0], NOW_SEC + TOLERANCE_SEC + 1)), "timestamp_out_of_tolerance");
      });

    test("`verify()` refusals say what failed, never the configuration: the same answer whatever the secret count or the tolerance (the trial's N11)", async () => {
      // The body the receiver answers with (errorResponse), for a refusal.
      const answer = async (run: Promise<unknown>) => {
        const err = await run.then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(AppError);
        return errorResponse(err as AppError).text();
      };
      const other = await sign(sample.body, secrets[1], NOW_SEC);
      const mismatch = await answer(verify(sample.body, other, [secrets[0]]));
      expect(await answer(verify(sample.body, other, [secrets[0], secrets[0], secrets[0]]))).toBe(mismatch);
      expect(mismatch).toContain('"error":"signature_mismatch"');
      expect(mismatch).not.toMatch(/secret|\(s\)|\b1\b/i);
      if (options.timestamped === false) return;
      const stale = await sign(sample.body, secrets[0], NOW_SEC - 400);
      const at = (toleranceSec: number, nowMs: number) =>
        answer(provider.verify({ body: sample.body, headers: new Headers(stale), secrets: [secrets[0]], toleranceSec, nowMs }));
      const late = await at(TOLERANCE_SEC, NOW_MS);
      expect(await at(60, NOW_MS + 3_600_000)).toBe(late);
      expect(late).toContain('"error":"timestamp_out_of_tolerance"');
      expect(late).not.toMatch(/tolerance is|\b300\b|\b400\b/);
    });

    test("`verify()` refuses a delivery missing a required header as signature_missing", async () => {
      const headers = await sign(sample.body, secrets[0], NOW_SEC);
      expect(options.requiredHeaders.length).toBeGreaterThan(0);
      for (const name of options.requiredHeaders) {
        const { [name]: _dropped, ...rest } = headers;
        expect(_dropped).toBeDefined();
        await refused(verify(sample.body, rest), "signature_missing");
      }
    });

    test("`verify()` refuses malformed signature headers as signature_malformed", async () => {
      const variants = options.malformed(await sign(sample.body, secrets[0], NOW_SEC));
      expect(variants.length).toBeGreaterThan(0);
      for (const headers of variants) await refused(verify(sample.body, headers), "signature_malformed");
    });

    test("`verify()` refuses a validly signed body that is not an event of the provider as invalid_event", async () => {
      for (const body of options.notEvents) await refused(verify(body, await sign(body, secrets[0], NOW_SEC)), "invalid_event");
    });

    const { withoutSubject } = options;
    if (withoutSubject)
      test("`subject()` throws PermanentError for a stored payload without a subject", () => {
        expect(() => provider.subject(withoutSubject)).toThrow(PermanentError);
      });
  });
}
