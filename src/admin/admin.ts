// The operator's page at /admin: server-rendered HTML on Web APIs only, the same operator functions
// as `bun run inbox` (src/ops), behind the admin token.
import { jsonLines } from "../log.ts";
import type { Db } from "../db/db.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { describeError } from "../errors.ts";
import { runRowAction, type RowAction } from "./actions.ts";
import { createAdminAuth, sameOrigin } from "./auth.ts";
import { applyBulk, confirmBody, readBulkForm, type BulkAction } from "./bulk.ts";
import { eventBody } from "./event-page.ts";
import { eventsBody } from "./events-page.ts";
import { readFilter } from "./filters.ts";
import { html } from "./html.ts";
import { outboxBody, requeueOutboxAction } from "./outbox-page.ts";
import { overviewBody, type DeliveryCounts, type OverviewEndpoint } from "./overview.ts";
import { page, plain, SECURITY_HEADERS, unauthorized } from "./page.ts";
import { ADMIN_CSS } from "./style.ts";

/** Dependencies of {@link createAdmin}. */
export interface AdminDeps {
  db: Db;
  /** `ADMIN_TOKEN` (≥ 32 characters, checked by the configuration). */
  token: string;
  /** `ADMIN_READONLY`: show everything, refuse every action (403) and show none. */
  readonly?: boolean;
  /** The configured endpoints, their modes and handler tables (for the overview and replay). */
  endpoints: readonly (OverviewEndpoint & { handlers: HandlerTable })[];
  /** The receiver's delivery counters, for the duplicate rate; absent where it has none (workerd). */
  deliveryCounts?: DeliveryCounts;
  /** Clock, ms since the epoch. Default `Date.now`. */
  now?: () => number;
  /** One JSON line per action and per failed page; default stdout. */
  log?: (line: Record<string, unknown>) => void;
}

/** The admin app: a Web-standard fetch for every path under `/admin`. */
export interface Admin {
  fetch(request: Request): Promise<Response>;
}

const ROW_ACTION = /^\/admin\/events\/([^/]+)\/(requeue|resolve|replay)$/;
/** An outbox id: a bigint ≥ 1 (checked against its range before any SQL). */
const OUTBOX_REQUEUE = /^\/admin\/outbox\/([1-9]\d{0,18})\/requeue$/;
const EVENT = /^\/admin\/events\/([^/]+)$/;

/**
 * Builds the operator's page. Every request must carry the admin token (HTTP Basic with any user
 * name, or `Authorization: Bearer`), else 401 with the Basic challenge and nothing more. `GET /admin`
 * is the overview, `/admin/events` the filtered list, `/admin/events/<id>` one event (`?payload=1`
 * adds its payload), `/admin/bulk?action=requeue|resolve&<filter>` a bulk action's confirmation,
 * `/admin/outbox` the unpublished outbox messages (`?state=needs_review`: the parked ones), and
 * `POST /admin/outbox/<id>/requeue` puts a parked message back to the dispatchers.
 * POSTs (row actions, `/admin/bulk`) are refused 403 when read-only, from another site
 * ({@link sameOrigin}), or, for a browser's Basic credential, without a valid CSRF token from one of
 * the page's forms; then 400, naming the fields and writing nothing, when a form field the action
 * takes is missing or invalid (row actions: {@link runRowAction}; bulk: {@link readBulkForm}). Every
 * answer carries {@link SECURITY_HEADERS}; a failure is a generic 500 page, its cause only in the log.
 */
export function createAdmin(deps: AdminDeps): Admin {
  const now = deps.now ?? Date.now;
  const log = deps.log ?? jsonLines();
  const auth = createAdminAuth(deps.token, now);
  const readonly = deps.readonly === true;
  const csrf = async () => {
    const { nonce, token } = await auth.issueCsrf();
    return html`<input type="hidden" name="csrf_nonce" value="${nonce}" /><input type="hidden" name="csrf_token" value="${token}" />`;
  };
  const handlersFor = (provider: string, endpoint: string) =>
    deps.endpoints.find((e) => e.provider === provider && e.name === endpoint)?.handlers;
  const show = (title: string, body: Parameters<typeof page>[1], status = 200) => page(title, body, { status, readonly });

  async function get(request: Request, url: URL): Promise<Response> {
    const path = url.pathname;
    if (path === "/admin" || path === "/admin/") return show("Overview", await overviewBody(deps.db, deps.endpoints, deps.deliveryCounts));
    if (path === "/admin/admin.css")
      return new Response(ADMIN_CSS, { headers: { "content-type": "text/css; charset=utf-8", ...SECURITY_HEADERS } });
    if (path === "/admin/outbox")
      return show(
        url.searchParams.get("state") === "needs_review" ? "Outbox: needs review" : "Outbox",
        await outboxBody(deps.db, url.searchParams, readonly, csrf),
      );
    if (path === "/admin/events") {
      const filter = readFilter(url.searchParams, now());
      try {
        return show(
          "Events",
          await eventsBody(deps.db, filter, url.searchParams, url.searchParams.get("after") ?? undefined, readonly),
          filter.problems.length ? 400 : 200,
        );
      } catch (err) {
        if ((err as Error).message.startsWith("Cannot read the page cursor"))
          return show("Events", html`<p class="error">${(err as Error).message}</p>`, 400);
        throw err;
      }
    }
    const event = EVENT.exec(path);
    if (event) {
      const id = decodePart(event[1]);
      const body = await eventBody(deps.db, id, url.searchParams.get("payload") === "1", readonly, csrf);
      return body ? show(`Event ${id}`, body) : show("No such event", html`<p>No inbox row has the event id ${id}.</p>`, 404);
    }
    if (path === "/admin/bulk") {
      if (readonly) return plain(403, "Read-only: ADMIN_READONLY=true refuses every action");
      const action = bulkAction(url.searchParams.get("action"));
      const filter = readFilter(url.searchParams, now());
      if (!action || filter.problems.length || filter.text !== undefined)
        return show(
          "Bulk action",
          html`<p class="error">A bulk action needs action=requeue or resolve and a valid filter without payload text.</p>`,
          400,
        );
      return show(`Bulk ${action}: confirm`, await confirmBody(deps.db, action, filter, csrf));
    }
    return plain(404, "Not found");
  }

  async function post(request: Request, url: URL, credential: "basic" | "bearer"): Promise<Response> {
    if (readonly) return plain(403, "Read-only: ADMIN_READONLY=true refuses every action");
    if (!sameOrigin(request)) return plain(403, "Refused: the form was not sent from this site");
    const form = await request.formData().catch(() => new FormData());
    const field = (name: string) => {
      const v = form.get(name);
      return typeof v === "string" ? v : "";
    };
    // A Bearer token is never sent by a browser on its own, so a script using one needs no form token.
    if (credential === "basic" && !(await auth.verifyCsrf(field("csrf_nonce"), field("csrf_token"))))
      return plain(403, "Refused: missing or invalid CSRF token (reload the page and try again)");
    const rowAction = ROW_ACTION.exec(url.pathname);
    if (rowAction) {
      const row = { provider: field("provider"), endpoint: field("endpoint"), eventId: decodePart(rowAction[1]) };
      const action = rowAction[2] as RowAction;
      const result = await runRowAction(deps.db, action, row, field("note"), handlersFor);
      log({ admin: action, provider: row.provider, endpoint: row.endpoint, event_id: row.eventId, status: result.status });
      return show(`${action[0]?.toUpperCase()}${action.slice(1)} ${row.eventId}`, result.body, result.status);
    }
    const outboxRequeue = OUTBOX_REQUEUE.exec(url.pathname);
    if (outboxRequeue && BigInt(outboxRequeue[1]!) <= 9_223_372_036_854_775_807n) {
      const id = outboxRequeue[1]!;
      const result = await requeueOutboxAction(deps.db, id);
      log({ admin: "outbox_requeue", outbox_id: id, status: result.status });
      return show(`Requeue outbox message ${id}`, result.body, result.status);
    }
    if (url.pathname === "/admin/bulk") {
      const params = new URLSearchParams([...form.entries()].filter((e): e is [string, string] => typeof e[1] === "string"));
      const bulk = readBulkForm(params, now());
      if ("problems" in bulk)
        return show(
          "Bulk action",
          html`<p class="error">Cannot apply the bulk action: ${bulk.problems.join("; ")}. Start again from the events page.</p>`,
          400,
        );
      const result = await applyBulk(deps.db, bulk.action, bulk.filter, bulk.expected, bulk.note);
      log({ admin: `bulk_${bulk.action}`, confirmed: bulk.expected.count, status: result.status });
      return show(`Bulk ${bulk.action}`, result.body, result.status);
    }
    return plain(404, "Not found");
  }

  return {
    async fetch(request) {
      const credential = await auth.check(request);
      if (!credential) return unauthorized();
      const url = new URL(request.url);
      try {
        if (request.method === "GET" || request.method === "HEAD") return await get(request, url);
        if (request.method === "POST") return await post(request, url, credential);
        return plain(405, "Method not allowed", { allow: "GET, HEAD, POST" });
      } catch (err) {
        log({ admin: "failed", path: url.pathname, error: describeError(err) });
        return show("Something failed", html`<p class="error">The page could not be built; the receiver's log says why.</p>`, 500);
      }
    },
  };
}

function bulkAction(value: string | null): BulkAction | undefined {
  return value === "requeue" || value === "resolve" ? value : undefined;
}

/** A path segment decoded; a malformed escape is kept as sent (it then names no event). */
function decodePart(segment: string | undefined): string {
  try {
    return decodeURIComponent(segment ?? "");
  } catch {
    return segment ?? "";
  }
}
