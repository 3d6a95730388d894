// Entry file: `bun run deliver <files|dirs…> [options]`: send fixture events like Stripe does.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { deliver, printableUrl, type EventFile } from "../deliver.ts";
import { DELIVERY_PROVIDERS, readProviderFixtures, type DeliveryProvider } from "../provider-delivery.ts";
import { DATA_DIR, readDevSecret } from "../../runtime/database.ts";

const USAGE = `Usage: bun run deliver <file.json|dir>… [options]
  --provider NAME    sign like stripe (default), github, shopify, paddle or adyen; a folder's headers.json
                     gives each file the headers its sender sets besides the signature (GitHub's
                     X-GitHub-Event and X-GitHub-Delivery, Shopify's X-Shopify-Topic and X-Shopify-Event-Id)
  --endpoint NAME    with --provider: the endpoint, for the URL and WEBHOOK_SECRET_<PROVIDER>_<NAME>
  --url URL          webhook URL (default http://127.0.0.1:\${PORT:-3000}/webhooks/<provider>[/<endpoint>])
  --secret S         signing secret (default: STRIPE_WEBHOOK_SECRET, else .data/dev-webhook-secret; with
                     --provider: WEBHOOK_SECRET_<PROVIDER>_<ENDPOINT>, its first value; Adyen: the hex HMAC key)
  --copies N         deliver every event N times (default 1)
  --concurrency N    deliveries in flight at once (default 1)
  --shuffle          shuffle the deliveries (with --seed N for a reproducible order)
  --attempts N       attempts per delivery (default 6); a 5xx, 408, 409, 429 or connection failure is
                     retried with backoff, any other 4xx is final at once (unlike Stripe: resending
                     a bad signature or body changes nothing); 3 connection failures in a row stop
                     the whole run
  --account acct_…   send each event as a connected account's, like a Connect endpoint receives it:
                     sets the classic event's \`account\` (a thin notification's \`context\`); "" = the platform's
  --livemode B       sets each event's livemode to true or false
  --id-suffix S      appends _S to each event id (Stripe's ids are unique across accounts and modes: the
                     same file sent for two accounts needs two ids, or the second is a duplicate)
                     With any of these three the body is re-serialized (2-space indent) before signing.`;

function fail(message: string): never {
  console.error(`${message}\n\n${USAGE}`);
  process.exit(2);
}

let parsed;
try {
  parsed = parseArgs({
    allowPositionals: true,
    options: {
      url: { type: "string" },
      provider: { type: "string", default: "stripe" },
      endpoint: { type: "string" },
      secret: { type: "string" },
      copies: { type: "string", default: "1" },
      concurrency: { type: "string", default: "1" },
      shuffle: { type: "boolean", default: false },
      seed: { type: "string", default: String(Date.now() % 100000) }, // any whole number ≥ 0
      attempts: { type: "string", default: "6" },
      account: { type: "string" },
      livemode: { type: "string" },
      "id-suffix": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
} catch (err) {
  fail(err instanceof Error ? err.message : String(err));
}
const { values, positionals } = parsed;
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
if (positionals.length === 0) fail("Missing event files: name JSON files or folders of them");

const number = (name: string, raw: string, min = 1): number => {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min) fail(`--${name} must be a whole number ≥ ${min}, got "${raw}"`);
  return n;
};

if (!(DELIVERY_PROVIDERS as readonly string[]).includes(values.provider))
  fail(`--provider must be one of ${DELIVERY_PROVIDERS.join(", ")}, got "${values.provider}"`);
const provider = values.provider as DeliveryProvider;
if (values.endpoint !== undefined && !/^[a-z][a-z0-9-]{0,62}$/.test(values.endpoint)) fail(`--endpoint must match ^[a-z][a-z0-9-]{0,62}$`);
if (provider !== "stripe" && (values.account !== undefined || values.livemode !== undefined || values["id-suffix"] !== undefined))
  fail("--account, --livemode and --id-suffix are for Stripe events only");

const files: EventFile[] =
  provider !== "stripe"
    ? readProviderFiles()
    : positionals.flatMap((path) => {
        if (!existsSync(path)) fail(`No such file or folder: ${path}`);
        const paths = statSync(path).isDirectory()
          ? readdirSync(path)
              .filter((f) => f.endsWith(".json"))
              .sort()
              .map((f) => join(path, f))
          : [path];
        return paths.map((p) => ({ name: basename(p), body: readFileSync(p, "utf8") }));
      });
if (files.length === 0) fail("No .json files found");
if (values.livemode !== undefined && values.livemode !== "true" && values.livemode !== "false")
  fail(`--livemode must be true or false, got "${values.livemode}"`);
if (values.account !== undefined && !/^(acct_[A-Za-z0-9]{1,250})?$/.test(values.account))
  fail(`--account must be an account id acct_… (or "" for the platform), got "${values.account}"`);
if (values["id-suffix"] !== undefined && !/^[A-Za-z0-9_]{1,40}$/.test(values["id-suffix"]))
  fail(`--id-suffix must be 1–40 of A–Z, a–z, 0–9, _, got "${values["id-suffix"]}"`);
if (values.account !== undefined || values.livemode !== undefined || values["id-suffix"] !== undefined) {
  for (const file of files) {
    let event: Record<string, unknown>;
    try {
      event = JSON.parse(file.body) as Record<string, unknown>;
    } catch {
      fail(`${file.name} is not JSON: --account, --livemode and --id-suffix need a JSON event`);
    }
    // Stripe names the connected account in a classic event's `account`, in a thin notification's `context`.
    const field = event.object === "v2.core.event" ? "context" : "account";
    if (values.account === "") delete event[field];
    else if (values.account !== undefined) event[field] = values.account;
    if (values.livemode !== undefined) event.livemode = values.livemode === "true";
    if (values["id-suffix"] !== undefined) event.id = `${String(event.id)}_${values["id-suffix"]}`;
    file.body = JSON.stringify(event, null, 2);
  }
}

/** The files of a non-Stripe provider, with their folder's headers.json. */
function readProviderFiles(): EventFile[] {
  try {
    return readProviderFixtures(positionals);
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
}

const devSecretFile = join(DATA_DIR, "dev-webhook-secret");
/** The development secret file's secret, or exit 2 with the reason (an empty file is not "no secret"). */
function devSecretOrFail(): string {
  try {
    return readDevSecret(devSecretFile);
  } catch (err) {
    return fail(err instanceof Error ? err.message : String(err));
  }
}
// An empty STRIPE_WEBHOOK_SECRET counts as unset, as it does for `bun run serve`.
const providerSecretVar = `WEBHOOK_SECRET_${provider}_${values.endpoint ?? "<NAME>"}`.toUpperCase().replaceAll("-", "_");
const stripeEndpointSecretVar =
  provider === "stripe" && values.endpoint ? `STRIPE_WEBHOOK_SECRET_${values.endpoint}`.toUpperCase().replaceAll("-", "_") : undefined;
const secret =
  values.secret ||
  (provider !== "stripe"
    ? process.env[providerSecretVar]?.split(",")[0]?.trim() ||
      fail(`Missing signing secret: pass --secret or set ${providerSecretVar} (with --endpoint)`)
    : undefined) ||
  // A second Stripe endpoint (STRIPE_ENDPOINTS) verifies with its own STRIPE_WEBHOOK_SECRET_<NAME>, as serve does.
  (stripeEndpointSecretVar ? process.env[stripeEndpointSecretVar]?.split(",")[0]?.trim() : undefined) ||
  process.env.STRIPE_WEBHOOK_SECRET?.split(",")[0]?.trim() ||
  (existsSync(devSecretFile) ? devSecretOrFail() : undefined);
if (!secret) fail("Missing signing secret: pass --secret or set STRIPE_WEBHOOK_SECRET");
/** Where the signing secret came from, for the hint after a refused signature (never the secret itself). */
const secretSource = values.secret
  ? "--secret"
  : provider !== "stripe"
    ? providerSecretVar
    : stripeEndpointSecretVar && process.env[stripeEndpointSecretVar]?.trim()
      ? `${stripeEndpointSecretVar} from this shell`
      : process.env.STRIPE_WEBHOOK_SECRET?.trim()
        ? "STRIPE_WEBHOOK_SECRET from this shell"
        : devSecretFile;

const url =
  values.url ?? `http://127.0.0.1:${process.env.PORT ?? 3000}/webhooks/${provider}${values.endpoint ? `/${values.endpoint}` : ""}`;
const seed = number("seed", values.seed, 0);
const started = performance.now();
// Ctrl-C stops the run and still prints what was delivered; a second Ctrl-C exits at once.
const interrupt = new AbortController();
process.once("SIGINT", () => {
  console.error("Interrupted: finishing the requests in flight (Ctrl-C again to quit now)");
  interrupt.abort();
  process.once("SIGINT", () => process.exit(130));
});
const summary = await deliver(files, {
  signal: interrupt.signal,
  url,
  secret,
  provider,
  copies: number("copies", values.copies),
  concurrency: number("concurrency", values.concurrency),
  shuffle: values.shuffle,
  seed,
  attempts: number("attempts", values.attempts),
});
const ms = Math.round(performance.now() - started);

const notSent = summary.gaveUp?.notSent ?? 0;
const failed = summary.failures.length + notSent;
const what = `${summary.deliveries} deliveries (${files.length} event(s) × ${values.copies}) to ${printableUrl(url)} in ${ms} ms`;
const how = `${summary.requests} requests${values.shuffle ? `, shuffled with seed ${seed}` : ""}`;
// Deliveries (one event copy each, however many requests its retries took) are counted apart from requests.
console.log(
  failed === 0
    ? `Delivered ${what} (${how})`
    : `Could not deliver ${failed} of ${what}: ${summary.deliveries - failed} answered 2xx, ${summary.failures.length} failed, ${notSent} not sent (${how})`,
);
for (const [outcome, count] of Object.entries(summary.outcomes).sort()) console.log(`  ${outcome.padEnd(10)} ${count}`);
// Every non-2xx answer or connection failure, whether or not an attempt was left to retry it.
for (const [status, count] of Object.entries(summary.retried).sort())
  console.log(`  ${status === "network" ? "no answer (connection failed)" : `answered ${status}`}: ${count}`);
// A connection that broke before the answer may still have been recorded: delivering again shows it as duplicate.
for (const f of summary.failures) {
  const note = f.status === "network" ? " (no answer: it may have been recorded; deliver again to see)" : "";
  console.error(`  FAILED ${f.name}: last status ${f.status}${note}`);
}
if (summary.failures.some((f) => String(f.status).startsWith("400")) || Object.keys(summary.retried).some((k) => k.startsWith("400"))) {
  console.error(
    `  Signed with the secret of ${secretSource}: a 400 signature_mismatch means the receiver verifies with another one (give both the same STRIPE_WEBHOOK_SECRET, or neither)`,
  );
}
if (summary.gaveUp?.reason === "interrupted") console.error(`Interrupted: ${summary.gaveUp.notSent} deliveries not sent.`);
else if (summary.gaveUp) {
  console.error(
    `Gave up: ${summary.gaveUp.reason}; ${summary.gaveUp.notSent} deliveries not sent. Is a receiver running there (bun run serve)?`,
  );
}
process.exit(interrupt.signal.aborted ? 130 : failed > 0 ? 1 : 0);
