// The Web-standard receiver: routes, a delivery from its raw body to its answer (verify, the endpoint's
// mode, the limiter's slots, the log line and metrics), and the one place failures become HTTP. One
// file on purpose: the path of a delivery reads top to bottom here; the modes are in receive.ts.
import { Router, type IRequest } from "itty-router";
import {
  COMMIT_NOT_REPLICATED,
  COMMIT_UNCONFIRMED,
  isDatabaseUnavailable,
  isDataError,
  isPermanent,
  refuseUnreplicated,
  sqlState,
  type Db,
} from "../db/db.ts";
import { AppError, describeError, errorResponse, PermanentError } from "../errors.ts";
import { jsonLines, type LogFn } from "../log.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import type { VerifiedEvent, WebhookProvider } from "../providers/provider.ts";
import {
  DEFAULT_STATEMENT_TIMEOUT_MS,
  receiveBatch,
  receiveHybrid,
  receiveSync,
  recordFallback,
  recordRefusal,
  refusalOf,
  type HybridOptions,
  type Mode,
  type Outcome,
  type ReceiveTarget,
} from "./receive.ts";
import { readBody } from "./request-body.ts";
import type { Context } from "@opentelemetry/api";
import { inSpan, messagingAttributes, requestContext, traceparentOf, type Telemetry } from "../telemetry.ts";
import { createBodyBudget, type BodyBudget } from "./body-budget.ts";
import { createLimiter } from "./limiter.ts";
import { createMetrics, type Metrics } from "./metrics.ts";
import { assertPatchedPostgres } from "../db/patched-postgres.ts";
import { createProbes, RETRY_AFTER_SEC } from "./probes.ts";
import { createGroupCommit, DEFAULT_GROUP_ROWS } from "./group-commit.ts";

/** One configured webhook endpoint: a provider, its secrets and the handler table it feeds. */
export interface Endpoint {
  /** Inbox `endpoint` column and URL segment, e.g. `billing`. */
  name: string;
  provider: WebhookProvider;
  /** The URL's provider segment, `/webhooks/<route>/<name>`; default `provider.name` (thin Stripe endpoints: `stripe`). */
  route?: string;
  /** Every currently valid signing secret (several during a rotation). */
  secrets: readonly string[];
  handlers: HandlerTable;
  /** Served at `/webhooks/<provider>` as well as `/webhooks/<provider>/<name>`. */
  isDefault?: boolean;
  /** Processing mode; default `sync`. */
  mode?: Mode;
  /**
   * The endpoint's Stripe mode (`STRIPE_MODE[_<NAME>]` or the API key's): true live, false test. An
   * event whose `livemode` differs is recorded `ignored_mode` and never applied. Undefined: both accepted.
   */
  livemode?: boolean;
  /** `STRIPE_CONNECT[_<NAME>]=true`: connected accounts' events are applied under their account; otherwise they are parked. */
  connect?: boolean;
  /**
   * Signature timestamp tolerance of this endpoint, seconds, both directions; default the provider's
   * (`WebhookProvider.toleranceSec`), else the receiver's (`AppDeps.toleranceSec`).
   */
  toleranceSec?: number;
  /** Hybrid mode's in-request budget and retry backoff; default 2 000 ms, 1 s doubling to 10 min. */
  hybrid?: HybridOptions;
}

/** Default request body bytes held at once (see `AppDeps.bodyBudget`): 32 MiB. */
export const DEFAULT_INFLIGHT_BODY_BYTES = 32 * 1024 * 1024;

const DEFAULT_HYBRID: HybridOptions = { budgetMs: 2_000, backoff: { baseMs: 1_000, capMs: 600_000 } };

/** Dependencies of {@link createApp}. */
export interface AppDeps {
  db: Db;
  /**
   * Connection for `/readyz` and `/metrics`; default `db`. Give them their own (one connection is
   * enough): postgres.js pipelines a query onto a busy connection when none is idle, so on the shared
   * pool a scrape can wait behind a delivery stuck on a row lock and report the database unreadable.
   */
  probeDb?: Db;
  endpoints: readonly Endpoint[];
  /** Signature timestamp tolerance, seconds, both directions. Default 300 (Stripe's default). */
  toleranceSec?: number;
  /** Largest accepted body, bytes. Default 1 MiB. */
  maxBodyBytes?: number;
  /**
   * Request body bytes held at once across requests (read, verified, processed); a request that would
   * pass it gets 503 `overloaded` before its body is read. Default a budget of 32 MiB.
   */
  bodyBudget?: BodyBudget;
  /** Clock, ms since the epoch. Default `Date.now`. */
  now?: () => number;
  log?: LogFn;
  /**
   * OpenTelemetry (src/telemetry.ts), when the entry file loaded `@opentelemetry/api`: a server span
   * per request, a `receive <endpoint>` span recording the event and a `process <endpoint>` span
   * applying it (sync, hybrid). Default: none, nothing is called.
   */
  telemetry?: Telemetry;
  /** Counters for `/metrics`; default a fresh registry. */
  metrics?: Metrics;
  /** Migrations the code expects, for `/readyz`; default: reachability only. */
  schemaVersion?: number;
  /** When set, `/metrics` requires this bearer token. */
  metricsToken?: string;
  /** Deliveries using the database at once (match the pool size); more wait. A group of async deliveries (`asyncGroupRows`) counts as one. Default: unbounded. */
  maxInFlight?: number;
  /** How long a delivery waits for a slot before 503 `overloaded`, ms. Default 2000. */
  queueTimeoutMs?: number;
  /**
   * Time bound of a delivery's transaction, ms: PostgreSQL's `statement_timeout` for every statement
   * of it, lock waits included, set inside the transaction (`boundTransaction`), so a receiver killed
   * or stalled mid-delivery leaves nothing running past it and commits nothing. A statement stopped by
   * it rolls its transaction back: 500, nothing recorded. Sync deliveries, fallback records and async
   * deliveries redone alone take it; hybrid endpoints bound their in-request attempt by their budget;
   * an async group's insert is one statement without a transaction (group-commit.ts says why). Default 10000.
   */
  statementTimeoutMs?: number;
  /**
   * The operator's page, answering every path under `/admin` (built by the wiring from `src/admin`
   * when `ADMIN_TOKEN` is set); absent, those paths are 404 like any unknown route.
   */
  admin?: App;
  /**
   * Async endpoints: most concurrent deliveries recorded by one multi-row insert and commit (see
   * `createGroupCommit`); 1 records each delivery by its own insert. Default 64.
   */
  asyncGroupRows?: number;
}

/** A Web-standard fetch handler, served as it is by Bun, Deno, Node.js adapters and Workers (see src/adapter/). */
export interface App {
  fetch(request: Request): Promise<Response>;
}

/**
 * Builds the receiver: `POST /webhooks/:provider[/:endpoint]` verifies, then runs the endpoint's mode
 * ({@link receiveSync}, {@link receiveHybrid}, or async through `createGroupCommit`); `GET /healthz`,
 * `/readyz` and `/metrics` come from {@link createProbes}. Answers 200 `{ outcome, event_id }` for
 * processed, duplicate, ignored, queued and needs_review (seed §5.5), 4xx `{ error, message }` for
 * input that must not be recorded (nothing written), 503 when the database is unavailable or every
 * slot stayed busy past the queue timeout, and 500 when processing failed (both rolled back: the
 * provider retries). A signed event that no retry can apply (a PermanentError or a data error) is
 * recorded as needs-review and answered 200 `needs_review`, visible to operators. Nothing is
 * acknowledged before its transaction committed, nor when a commit of the pool stopped waiting for its
 * synchronous standby meanwhile (db.ts `refuseUnreplicated`: 503), and every piece of a delivery's
 * database work holds one of the `maxInFlight` slots while it runs (a group of async deliveries holds one).
 * @throws Error when the postgres.js loaded is not the patched one ({@link assertPatchedPostgres}).
 */
export function createApp(deps: AppDeps): App {
  assertPatchedPostgres();
  const now = deps.now ?? Date.now;
  const log = deps.log ?? jsonLines();
  const toleranceSec = deps.toleranceSec ?? 300;
  const maxBodyBytes = deps.maxBodyBytes ?? 1024 * 1024;
  const metrics = deps.metrics ?? createMetrics();
  const bodyBudget = deps.bodyBudget ?? createBodyBudget(DEFAULT_INFLIGHT_BODY_BYTES);
  const statementTimeoutMs = deps.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  const limiter = deps.maxInFlight === undefined ? undefined : createLimiter(deps.maxInFlight, deps.queueTimeoutMs ?? 2_000);
  /** Runs one piece of a delivery's database work in a slot of the limiter. */
  const slot = <T>(work: () => Promise<T>): Promise<T> => (limiter ? limiter.run(work) : work());
  const groups = createGroupCommit(deps.db, {
    maxRows: deps.asyncGroupRows ?? DEFAULT_GROUP_ROWS,
    limiter,
    timeoutMs: statementTimeoutMs,
    queueTimeoutMs: limiter ? (deps.queueTimeoutMs ?? 2_000) : undefined,
    // Each delivery still gets its own line; this one says why its group was redone one by one.
    onFallback: (deliveries, err) => log({ group_fallback: deliveries, detail: describeError(err) }),
  });
  const probes = createProbes({
    db: deps.probeDb ?? deps.db,
    metrics,
    endpoints: deps.endpoints.map((e) => ({ provider: e.provider.name, endpoint: e.name })),
    schemaVersion: deps.schemaVersion,
    metricsToken: deps.metricsToken,
  });

  async function receive(request: IRequest): Promise<Response> {
    const t = deps.telemetry;
    if (!t) return receiveTraced(request, undefined);
    const server = {
      name: "POST /webhooks/:provider/:endpoint",
      kind: t?.api.SpanKind.SERVER,
      parent: requestContext(t, request.headers),
      attributes: { "http.request.method": "POST", "http.route": "/webhooks/:provider/:endpoint", "url.path": new URL(request.url).pathname },
    };
    return inSpan(t, server, async (span, context) => {
      const response = await receiveTraced(request, context);
      span?.setAttribute("http.response.status_code", response.status);
      if (response.status >= 500) span?.setStatus({ code: t.api.SpanStatusCode.ERROR });
      return response;
    });
  }

  async function receiveTraced(request: IRequest, traced: Context | undefined): Promise<Response> {
    const started = now();
    const endpoint = findEndpoint(deps.endpoints, request.params.provider, request.params.endpoint);
    const entry: Record<string, unknown> = { endpoint: endpoint?.name ?? request.params.endpoint ?? null };
    const spanContext = traced && deps.telemetry?.api.trace.getSpanContext(traced);
    if (spanContext && deps.telemetry?.api.isSpanContextValid(spanContext)) Object.assign(entry, { trace_id: spanContext.traceId, span_id: spanContext.spanId });
    let response: Response;
    const hold = bodyBudget.hold();
    try {
      if (!endpoint) throw new AppError("unknown_endpoint", `Unknown webhook endpoint: ${new URL(request.url).pathname}`);
      const body = await readBody(request, maxBodyBytes, hold);
      const input = {
        body,
        headers: request.headers,
        secrets: endpoint.secrets,
        toleranceSec: endpoint.toleranceSec ?? endpoint.provider.toleranceSec ?? toleranceSec,
        nowMs: now(),
      };
      const { provider } = endpoint;
      if (provider.verifyAll) {
        // A delivery of several events (Adyen): all recorded in one transaction, answered once after its commit.
        const events = await provider.verifyAll(input);
        Object.assign(entry, { event_id: events.map((e) => e.id).join(","), type: [...new Set(events.map((e) => e.type))].join(",") });
        const outcomes = await refuseUnreplicated(deps.db, () => receiveBatchIn(endpoint, events));
        entry.outcomes = outcomes;
        entry.outcome = new Set(outcomes).size === 1 ? outcomes[0] : "mixed";
        response = provider.accepted?.() ?? Response.json({ outcomes, event_ids: events.map((e) => e.id) });
      } else {
        const event = await provider.verify(input);
        Object.assign(entry, { event_id: event.id, type: event.type });
        const recording = {
          name: `receive ${endpoint.name}`,
          kind: deps.telemetry?.api.SpanKind.CONSUMER,
          parent: traced,
          attributes: messagingAttributes(provider.name, endpoint.name, event.id, event.type, "receive"),
        };
        const outcome = await inSpan(deps.telemetry, recording, async (span, context) => {
          event.traceparent = traceparentOf(deps.telemetry, span);
          const result = await refuseUnreplicated(deps.db, () => receiveIn(endpoint, event, entry, context));
          span?.setAttribute("webhook_inbox.outcome", result);
          return result;
        });
        entry.outcome = outcome;
        response = provider.accepted?.() ?? Response.json({ outcome, event_id: event.id });
      }
    } catch (err) {
      const appError = toAppError(err, entry.event_id);
      Object.assign(entry, {
        outcome: "rejected",
        error: appError.code,
        detail: err instanceof AppError ? err.message : describeError(err),
      });
      response = errorResponse(appError, appError.status === 503 ? { "retry-after": RETRY_AFTER_SEC } : {});
    } finally {
      hold.release();
    }
    const durationMs = now() - started;
    const level = response.status >= 500 ? "error" : response.status >= 400 || entry.outcome === "needs_review" ? "warn" : "info";
    log({ ...entry, status: response.status, duration_ms: durationMs, level, message: "delivery" });
    if (endpoint) {
      metrics.observe({
        provider: endpoint.provider.name,
        endpoint: endpoint.name,
        outcome: String(entry.outcome),
        reason: entry.error as string | undefined,
        durationSec: durationMs / 1000,
      });
    }
    return response;
  }

  /**
   * Runs `apply` (the event's transaction) in a `process <endpoint>` span under `traced`, giving it the
   * span's traceparent for the outbox rows it writes; the outcome and a fallback's cause go on the span.
   */
  function processSpan(
    endpoint: Endpoint,
    event: VerifiedEvent,
    traced: Context | undefined,
    apply: (traceparent: string | undefined, onFallback: (err: unknown) => void) => Promise<Outcome>,
  ): Promise<Outcome> {
    const t = deps.telemetry;
    const spec = { name: `process ${endpoint.name}`, parent: traced, attributes: messagingAttributes(endpoint.provider.name, endpoint.name, event.id, event.type, "process") };
    return inSpan(t, spec, async (span) => {
      const failed = (err: unknown) => {
        span?.setAttribute("error.type", err instanceof Error ? err.constructor.name : "unknown");
        span?.setStatus({ code: t!.api.SpanStatusCode.ERROR, message: describeError(err).slice(0, 300) });
      };
      const outcome = await apply(traceparentOf(t, span), failed);
      span?.setAttribute("webhook_inbox.outcome", outcome);
      return outcome;
    });
  }

  /** Runs the endpoint's mode; a fallback's cause goes into the log line. */
  function receiveIn(endpoint: Endpoint, event: VerifiedEvent, entry: Record<string, unknown>, traced: Context | undefined): Promise<Outcome> {
    const target: ReceiveTarget = { provider: endpoint.provider.name, endpoint: endpoint.name, handlers: endpoint.handlers };
    const hybrid = endpoint.hybrid ?? DEFAULT_HYBRID;
    // A failure no retry can fix is parked as needs-review (200): a 5xx would make the provider retry in vain.
    const park = (err: unknown): Promise<Outcome> => {
      entry.fallback = describeError(err);
      return recordFallback(deps.db, target, event, err, hybrid.backoff);
    };
    const parkWhen = (permanent: (err: unknown) => boolean) => (err: unknown) => {
      if (!permanent(err)) throw err;
      return park(err);
    };
    // A test event at a live endpoint (or the reverse) is kept and counted, never applied: a 2xx so Stripe does not
    // retry it. A connected account's event at a non-Connect endpoint is parked when it would be applied.
    const refusal = refusalOf(endpoint, event);
    if (refusal?.kind === "account") entry.fallback = refusal.reason;
    if (refusal) return slot(() => recordRefusal(deps.db, target, event, refusal, hybrid.backoff));
    if (event.sanitized?.typeChanged) {
      // No handler can be chosen for a type that is not the one sent: keep it, with its raw body, for an operator.
      const why = `Event type holds characters PostgreSQL cannot store (${event.sanitized.replaced}): recorded with them replaced, not applied`;
      return slot(() => park(new PermanentError(why)));
    }
    switch (endpoint.mode ?? "sync") {
      case "sync":
        return slot(() =>
          processSpan(endpoint, event, traced, (traceparent) => receiveSync(deps.db, target, event, statementTimeoutMs, traceparent)).catch(
            parkWhen(isPermanent),
          ),
        );
      case "hybrid":
        return slot(() =>
          processSpan(endpoint, event, traced, (traceparent, failed) =>
            receiveHybrid(deps.db, target, event, { ...hybrid, traceparent }, (err) => {
              entry.fallback = describeError(err);
              failed(err);
            }),
          ),
        );
      case "async":
        // Only the payload itself can be permanent here (jsonb cannot hold it): kept with its raw body.
        return groups.receive(target, event).catch((err: unknown) => {
          if (!isDataError(err)) throw err;
          return slot(() => park(err));
        });
    }
  }

  /** A delivery of several events in the endpoint's mode, in one slot: one transaction (async: one statement). */
  function receiveBatchIn(endpoint: Endpoint, events: readonly VerifiedEvent[]): Promise<Outcome[]> {
    const target: ReceiveTarget = { provider: endpoint.provider.name, endpoint: endpoint.name, handlers: endpoint.handlers };
    const options = { mode: endpoint.mode ?? "sync", timeoutMs: statementTimeoutMs, hybrid: endpoint.hybrid ?? DEFAULT_HYBRID } as const;
    return slot(() => receiveBatch(deps.db, target, events, options));
  }

  const router = Router();
  router
    .post("/webhooks/:provider/:endpoint?", receive)
    .get("/healthz", probes.healthz)
    .head("/healthz", probes.healthz)
    .get("/readyz", probes.readyz)
    .head("/readyz", probes.readyz)
    .get("/metrics", probes.metrics)
    .head("/metrics", probes.metrics)
    .all("/webhooks/:provider/:endpoint?", () =>
      errorResponse(new AppError("method_not_allowed", "Webhooks are delivered with POST"), { allow: "POST" }),
    )
    .all("/healthz", wrongMethod)
    .all("/readyz", wrongMethod)
    .all("/metrics", wrongMethod)
    .all("/admin", (request) => (deps.admin ? deps.admin.fetch(request) : notFound(request)))
    .all("/admin/*", (request) => (deps.admin ? deps.admin.fetch(request) : notFound(request)))
    .all("*", notFound);

  return {
    fetch(request) {
      const response: Promise<Response> = router.fetch(request);
      if (request.method !== "HEAD") return response;
      // HEAD: same status and headers as GET, no body (RFC 9110 §9.3.2).
      return response.then((r) => new Response(null, { status: r.status, headers: r.headers }));
    },
  };
}

function notFound(request: Request): Response {
  return errorResponse(new AppError("not_found", `No route for ${new URL(request.url).pathname}`));
}

function wrongMethod(request: Request): Response {
  return errorResponse(new AppError("method_not_allowed", `Use GET ${new URL(request.url).pathname}`), { allow: "GET, HEAD" });
}

function findEndpoint(endpoints: readonly Endpoint[], provider?: string, name?: string): Endpoint | undefined {
  return endpoints.find((e) => (e.route ?? e.provider.name) === provider && (name === undefined ? e.isDefault === true : e.name === name));
}

/** Maps any failure to the error the client sees. Unexpected errors become 500 with a generic message. */
function toAppError(err: unknown, eventId: unknown): AppError {
  if (err instanceof AppError) return err;
  const id = typeof eventId === "string" ? eventId : "the event";
  if (isDataError(err)) {
    // The event cannot be stored even as raw text: no retry can help, so say so instead of a 5xx loop.
    return new AppError("invalid_event", `Cannot record ${id}: PostgreSQL refuses this event (SQLSTATE ${sqlState(err)})`);
  }
  const code = (err as { code?: unknown } | null)?.code;
  if (code === COMMIT_UNCONFIRMED || code === COMMIT_NOT_REPLICATED || code === "QUERY_STUCK")
    return new AppError(
      "database_unavailable",
      `Cannot confirm ${id} was recorded: PostgreSQL did not confirm its commit in time; not acknowledged, retry later (a retry finds it if it was saved)`,
    );
  if (isDatabaseUnavailable(err))
    return new AppError("database_unavailable", `Cannot record ${id}: database unavailable; nothing was recorded, retry later`);
  return new AppError("processing_failed", `Cannot process ${id}: the transaction was rolled back; nothing was recorded, retry later`);
}
