import { Router, type IRequest } from "itty-router";
import { isDatabaseUnavailable, type Db } from "./db.ts";
import { AppError, errorResponse } from "./errors.ts";
import type { HandlerTable } from "./handler-table.ts";
import type { WebhookProvider } from "./provider.ts";
import { receiveSync, type Outcome } from "./receive.ts";
import { readBody } from "./request-body.ts";

/** One configured webhook endpoint: a provider, its secrets and the handler table it feeds. */
export interface Endpoint {
  /** Inbox `endpoint` column and URL segment, e.g. `billing`. */
  name: string;
  provider: WebhookProvider;
  /** Every currently valid signing secret (several during a rotation). */
  secrets: readonly string[];
  handlers: HandlerTable;
  /** Served at `/webhooks/<provider>` as well as `/webhooks/<provider>/<name>`. */
  isDefault?: boolean;
}

/** One structured log line (JSON); never secrets, signature headers or payloads. */
export type LogFn = (line: Record<string, unknown>) => void;

/** Dependencies of {@link createApp}. */
export interface AppDeps {
  db: Db;
  endpoints: readonly Endpoint[];
  /** Signature timestamp tolerance, seconds, both directions. Default 300 (Stripe's default). */
  toleranceSec?: number;
  /** Largest accepted body, bytes. Default 1 MiB. */
  maxBodyBytes?: number;
  /** Clock, ms since the epoch. Default `Date.now`. */
  now?: () => number;
  log?: LogFn;
}

/** A Web-standard fetch handler, usable by Bun.serve, Deno.serve, Node adapters and Workers. */
export interface App {
  fetch(request: Request): Promise<Response>;
}

const RETRY_AFTER_SEC = "5";

/**
 * Builds the receiver: `POST /webhooks/:provider[/:endpoint]` verifies, then runs {@link receiveSync};
 * `GET /healthz` checks the database. Answers 200 `{ outcome, event_id }` for processed, duplicate and
 * ignored (seed §5.5), 4xx `{ error, message }` for input that must not be recorded (nothing written),
 * 503 when the database is unavailable and 500 when processing failed (both rolled back: the provider
 * retries). Nothing is acknowledged before its transaction committed.
 */
export function createApp(deps: AppDeps): App {
  const now = deps.now ?? Date.now;
  const log = deps.log ?? ((line) => console.log(JSON.stringify(line)));
  const toleranceSec = deps.toleranceSec ?? 300;
  const maxBodyBytes = deps.maxBodyBytes ?? 1024 * 1024;

  async function receive(request: IRequest): Promise<Response> {
    const started = now();
    const endpoint = findEndpoint(deps.endpoints, request.params.provider, request.params.endpoint);
    const entry: Record<string, unknown> = { endpoint: endpoint?.name ?? request.params.endpoint ?? null };
    let response: Response;
    try {
      if (!endpoint) throw new AppError("unknown_endpoint", `Unknown webhook endpoint: ${new URL(request.url).pathname}`);
      const body = await readBody(request, maxBodyBytes);
      const event = await endpoint.provider.verify({ body, headers: request.headers, secrets: endpoint.secrets, toleranceSec, nowMs: now() });
      Object.assign(entry, { event_id: event.id, type: event.type });
      const target = { provider: endpoint.provider.name, endpoint: endpoint.name, handlers: endpoint.handlers };
      const outcome: Outcome = await receiveSync(deps.db, target, event);
      entry.outcome = outcome;
      response = Response.json({ outcome, event_id: event.id });
    } catch (err) {
      const appError = toAppError(err, entry.event_id);
      Object.assign(entry, { outcome: "rejected", error: appError.code, detail: describe(err) });
      response = errorResponse(appError, appError.status === 503 ? { "retry-after": RETRY_AFTER_SEC } : {});
    }
    log({ ...entry, status: response.status, duration_ms: now() - started });
    return response;
  }

  async function health(): Promise<Response> {
    try {
      await withTimeout(deps.db`select 1`.execute(), 2000);
      return Response.json({ status: "ok" });
    } catch {
      return errorResponse(new AppError("database_unavailable", "Database is not reachable"), { "retry-after": RETRY_AFTER_SEC });
    }
  }

  const router = Router();
  router
    .post("/webhooks/:provider/:endpoint?", receive)
    .get("/healthz", health)
    .all("/webhooks/*", () => errorResponse(new AppError("method_not_allowed", "Webhooks are delivered with POST"), { allow: "POST" }))
    .all("/healthz", () => errorResponse(new AppError("method_not_allowed", "Use GET /healthz"), { allow: "GET" }))
    .all("*", (request) => errorResponse(new AppError("not_found", `No route for ${new URL(request.url).pathname}`)));

  return { fetch: (request) => router.fetch(request) };
}

function findEndpoint(endpoints: readonly Endpoint[], provider?: string, name?: string): Endpoint | undefined {
  return endpoints.find((e) => e.provider.name === provider && (name === undefined ? e.isDefault === true : e.name === name));
}

/** Maps any failure to the error the client sees. Unexpected errors become 500 with a generic message. */
function toAppError(err: unknown, eventId: unknown): AppError {
  if (err instanceof AppError) return err;
  const id = typeof eventId === "string" ? eventId : "the event";
  if (isDatabaseUnavailable(err)) return new AppError("database_unavailable", `Cannot record ${id}: database unavailable; nothing was recorded, retry later`);
  return new AppError("processing_failed", `Cannot process ${id}: the transaction was rolled back; nothing was recorded, retry later`);
}

/** Error class and a short message for logs: never a payload (handler messages name fields, not values). */
export function describe(err: unknown): string {
  if (err instanceof AppError) return err.message;
  const e = err as { name?: unknown; code?: unknown; message?: unknown } | null;
  const name = typeof e?.name === "string" ? e.name : "Error";
  const code = typeof e?.code === "string" ? ` ${e.code}` : "";
  const message = typeof e?.message === "string" ? e.message : String(err);
  return `${name}${code}: ${message}`.slice(0, 300);
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
