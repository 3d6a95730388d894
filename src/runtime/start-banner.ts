import type { Config } from "../config.ts";

/**
 * The lines `bun run serve` prints under "webhook-inbox listening on <base>": each endpoint's webhook
 * URL, then the operator's page and the metrics URL, each saying whether it is on and how it is
 * protected. `base` is the listening URL (`http://host:port`, no trailing slash). Names the variables
 * (`ADMIN_TOKEN`, `ADMIN_READONLY`, `METRICS_TOKEN`), never their values. Each line starts with two
 * spaces. An endpoint with a Stripe mode says `live events only` or `test events only` (the other
 * mode is recorded ignored_mode), and `Connect` when it applies connected accounts' events; one without
 * a mode says nothing more: it accepts both modes, as before (docs/stripe-connect.md). The endpoints of
 * `WEBHOOK_ENDPOINTS` follow, in that order, as `endpoint <provider>/<name> (<mode>): POST
 * <base>/webhooks/<provider>/<name>`, the first of each provider also naming `<base>/webhooks/<provider>`
 * (receiver/endpoints.ts `providerEndpoints`; docs/providers/README.md). When any endpoint queues events
 * (async, hybrid, thin, refetch), a `worker:` line says a worker must run to apply them.
 */
export function startBanner(
  config: Pick<Config, "endpoints" | "adminToken" | "adminReadonly" | "metricsToken"> & Partial<Pick<Config, "providerEndpoints">>,
  base: string,
): string[] {
  const lines = config.endpoints.map(
    (e, i) =>
      `  endpoint ${e.name} (${e.kind === "thin" ? "thin, " : e.refetch ? "refetch, " : ""}${e.mode}${scope(e)}): POST ${base}/webhooks/stripe/${e.name}${i === 0 ? ` (also ${base}/webhooks/stripe)` : ""}`,
  );
  const providers = config.providerEndpoints ?? [];
  providers.forEach((e, i) => {
    const first = providers.findIndex((other) => other.provider === e.provider) === i;
    lines.push(
      `  endpoint ${e.provider}/${e.name} (${e.mode}): POST ${base}/webhooks/${e.provider}/${e.name}${first ? ` (also ${base}/webhooks/${e.provider})` : ""}`,
    );
  });
  // Queued rows are applied only by a worker: say so where an endpoint queues (a receiver alone never applies them).
  const queues = [...config.endpoints.map((e) => (e.kind === "thin" || e.refetch ? "async" : e.mode)), ...providers.map((e) => e.mode)];
  if (queues.some((mode) => mode !== "sync"))
    lines.push("  worker: async and hybrid endpoints (thin and refetch ones too) queue events that only `bun run worker` applies: run one");
  lines.push(
    config.adminToken === undefined
      ? `  admin page: off (${base}/admin answers 404): set ADMIN_TOKEN (≥ 32 characters) to turn it on`
      : `  admin page: ${base}/admin (on: any user name, ADMIN_TOKEN as the password${config.adminReadonly ? "; read-only: ADMIN_READONLY=true" : ""})`,
    config.metricsToken === undefined
      ? `  metrics: GET ${base}/metrics (open: no METRICS_TOKEN; keep HOST on a private interface)`
      : `  metrics: GET ${base}/metrics (protected: Authorization: Bearer <METRICS_TOKEN>)`,
  );
  return lines;
}

/** `, Connect, live events only` and the like for an endpoint's account and mode settings; "" when it has none. */
function scope(e: Config["endpoints"][number]): string {
  const mode = e.livemode === undefined ? "" : e.livemode ? ", live events only" : ", test events only";
  return `${e.connect ? ", Connect" : ""}${mode}`;
}
