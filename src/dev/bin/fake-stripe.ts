// Entry file: `bun run fake-stripe [--port N] [--key sk_test_…] [--delivered] [files|dirs of event JSON …]`.
// Serves the local fake Stripe API (src/dev/fake-stripe/) on 127.0.0.1 with the given classic events
// (default: the invoice lifecycle and money-out fixtures), for trying `reconcile`, thin endpoints and
// refetch mode by hand: point STRIPE_API_BASE at the printed URL. An event keeps its own `created` (a real
// Stripe event has one, whichever way it is read) while that is inside the 30 days Stripe keeps events; an
// older one (the fixtures are) gets a recent time (one per second in file order, ending now), as if Stripe
// still held it and had never delivered it; each event's
// `data.object` is also served by retrieve and list (`/v1/invoices`, `/v1/refunds`, …) in its latest
// state. Without --delivered every event also lists under `delivery_success=false`. A file holding a v2
// event (`object: "v2.core.event"`) or any other Stripe object is served as written (test/fixtures/stripe/
// health-recovery/api: a health event and the paid invoice it names, with no event of its own). Runs until Ctrl-C.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startFakeStripe } from "../fake-stripe/serve.ts";
import { V2_EVENTS } from "../fake-stripe/app.ts";
import { FakeStripeStore, type StoredObject } from "../fake-stripe/store.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { STRIPE_EVENTS_KEPT_MS } from "../../providers/stripe.ts";

const USAGE = "Usage: bun run fake-stripe [--port N] [--key sk_test_…] [--delivered] [files|dirs of Stripe event JSON …]";
let parsed;
try {
  parsed = parseArgs({
    allowPositionals: true,
    options: {
      port: { type: "string", default: "12111" },
      key: { type: "string" },
      delivered: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
} catch (err) {
  console.error(`${err instanceof Error ? err.message : String(err)}\n${USAGE}`);
  process.exit(2);
}
if (parsed.values.help) {
  console.log(USAGE);
  process.exit(0);
}
const port = Number(parsed.values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`--port must be 0–65535\n${USAGE}`);
  process.exit(2);
}
const paths =
  parsed.positionals.length > 0 ? parsed.positionals : ["test/fixtures/stripe/invoice-lifecycle", "test/fixtures/stripe/money-out"];
const files = paths.flatMap((p) =>
  statSync(p).isDirectory()
    ? readdirSync(p)
        .filter((f) => f.endsWith(".json"))
        .sort()
        .map((f) => join(p, f))
    : [p],
);
const read = files.map((f) => JSON.parse(readFileSync(f, "utf8")) as StoredObject & { data?: { object?: StoredObject } });
const events = read.filter((e) => e.object === "event");
const store = new FakeStripeStore(parsed.values.key);
// A v2 event (a thin notification's full form) is served by GET /v2/core/events/<id> as written; any
// other object (an invoice no event announces) by retrieve and list, as written.
for (const o of read.filter((e) => e.object !== "event")) store.put(o.object === "v2.core.event" ? V2_EVENTS : `${o.object}s`, o);
const now = Math.floor(Date.now() / 1000);
events.forEach((event, i) => {
  const own = typeof event.created === "number" ? event.created : undefined;
  const created = own !== undefined && own > now - STRIPE_EVENTS_KEPT_MS / 1000 && own <= now ? own : now - events.length + i;
  store.putEvent({ ...event, created }, parsed.values.delivered);
  const object = event.data?.object;
  if (object && typeof object.id === "string" && typeof object.object === "string") store.put(`${object.object}s`, { ...object, created });
});
const fake = startFakeStripe({ port, store });
console.log(
  `fake Stripe API on ${fake.url}: ${events.length} events, ${[...store.objects.keys()].filter((k) => k !== "events").join(", ") || "no objects"}; ` +
    `STRIPE_API_BASE=${fake.url} STRIPE_API_KEY=${parsed.values.key ? "<the --key given>" : "sk_test_anything123 (any key is accepted)"}`,
);
onStopSignals(
  () => void fake.stop().then(() => process.exit(0)),
  () => process.exit(1),
);
