// A local stand-in for the parts of Stripe's API that webhook-inbox reads, as a Web-standard fetch
// app. It follows Stripe's API reference "Pagination" (newest first; `limit` 1–100, default 10;
// `starting_after` pages to older objects, `ending_before` to newer ones, each page still newest
// first; `has_more`), "List all events" (`created` as a number or a range of gt/gte/lt/lte, `type`
// with a `*` wildcard, `types` up to 20, `delivery_success`) and "Errors" (JSON `error` bodies, 401 on a
// wrong key, 404 `resource_missing`, 429 when rate limited). With `eventRetentionSec` set, events
// older than that are gone, as Stripe keeps events for 30 days: not listed, and a 400
// `resource_missing` as a cursor. Query parameters are parsed in the
// indexed bracket form stripe-node sends (`created[gte]=…`, `types[0]=…`).
import { FakeStripeStore, type StoredObject } from "./store.ts";

type Query = Record<string, string>;

const json = (status: number, body: unknown): Response =>
  new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", "request-id": `req_fake_${crypto.randomUUID().slice(0, 8)}` },
  });

/** A Stripe-shaped error response. */
function stripeError(status: number, type: string, message: string, code?: string, param?: string): Response {
  return json(status, { error: { type, message, ...(code ? { code } : {}), ...(param ? { param } : {}) } });
}

/** Whether `created` passes a `created` filter given as `created=N` or `created[gt|gte|lt|lte]=N`. */
function createdMatches(created: number, q: Query): boolean | Response {
  for (const [k, v] of Object.entries(q)) {
    const m = /^created(?:\[(gt|gte|lt|lte)\])?$/.exec(k);
    if (!m) continue;
    const n = Number(v);
    if (!/^\d+$/.test(v)) return stripeError(400, "invalid_request_error", `Invalid integer: ${v}`, "parameter_invalid_integer", k);
    const op = m[1];
    if (op === undefined && created !== n) return false;
    if (op === "gt" && !(created > n)) return false;
    if (op === "gte" && !(created >= n)) return false;
    if (op === "lt" && !(created < n)) return false;
    if (op === "lte" && !(created <= n)) return false;
  }
  return true;
}

/** Filters an event list by `type` (with `*` wildcard), `types[]` and `delivery_success`. */
function eventFilter(store: FakeStripeStore, q: Query): ((e: StoredObject) => boolean) | Response {
  const types = Object.entries(q)
    .filter(([k]) => /^types\[\d+\]$/.test(k))
    .map(([, v]) => v);
  if (types.length > 20)
    return stripeError(400, "invalid_request_error", "types may contain at most 20 entries", "parameter_invalid_array", "types");
  if (types.length > 0 && q.type !== undefined)
    return stripeError(400, "invalid_request_error", "You may pass either type or types, but not both", undefined, "types");
  const pattern = q.type === undefined ? undefined : new RegExp(`^${q.type.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
  const delivery = q.delivery_success;
  return (e) =>
    (types.length === 0 || types.includes(String(e.type))) &&
    (!pattern || pattern.test(String(e.type))) &&
    (delivery === undefined || (delivery === "false") === store.undelivered.has(e.id));
}

/**
 * One page of `all` (newest first, filtered) for the query's limit and cursors, as Stripe's list
 * object. A cursor is placed among `every` object of the resource (newest first, unfiltered), as
 * Stripe does: it need not match the filters, only exist.
 */
function page(all: StoredObject[], every: StoredObject[], q: Query, url: string): Response {
  const limit = q.limit === undefined ? 10 : Number(q.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100)
    return stripeError(
      400,
      "invalid_request_error",
      "This value must be greater than or equal to 1 and less than or equal to 100.",
      undefined,
      "limit",
    );
  if (q.starting_after !== undefined && q.ending_before !== undefined)
    return stripeError(400, "invalid_request_error", "You may only specify one of these parameters: ending_before, starting_after.");
  let data: StoredObject[];
  let hasMore: boolean;
  const cursor = q.starting_after ?? q.ending_before;
  if (cursor !== undefined) {
    const position = every.findIndex((o) => o.id === cursor);
    // Where the cursor sits in the filtered list: at itself, or before the first object older than it.
    const rank = new Map(every.map((o, i) => [o.id, i]));
    const after = all.findIndex((o) => (rank.get(o.id) ?? 0) >= position);
    const at = position < 0 ? -1 : after < 0 ? all.length : after;
    const self = all[at]?.id === cursor ? 1 : 0;
    if (at < 0)
      return stripeError(
        400,
        "invalid_request_error",
        `No such object: '${cursor}'`,
        "resource_missing",
        q.starting_after !== undefined ? "starting_after" : "ending_before",
      );
    if (q.starting_after !== undefined) {
      data = all.slice(at + self, at + self + limit);
      hasMore = at + self + limit < all.length;
    } else {
      const from = Math.max(0, at - limit);
      data = all.slice(from, at);
      hasMore = from > 0;
    }
  } else {
    data = all.slice(0, limit);
    hasMore = limit < all.length;
  }
  return json(200, { object: "list", data, has_more: hasMore, url });
}

/** The store resource of v2 events (thin events' full form, `GET /v2/core/events/<id>`). */
export const V2_EVENTS = "v2/core/events";

/**
 * The fake's fetch handler. Routes: `GET /v2/core/events/<id>` (a v2 event put under {@link V2_EVENTS},
 * what stripe-node's `fetchEvent()` on a thin notification reads; 404 `resource_missing` when absent), `GET /v1/<resource>` (list, filtered by `created`; events also
 * by type, types and delivery_success; invoices also by `status`) and `GET /v1/<resource>/<id>`
 * (retrieve; 404 `resource_missing` when absent). A request is made for the account its
 * `Stripe-Account` (or `Stripe-Context`) header names, the platform without one: it lists and retrieves
 * only that account's objects (another account's id is a 404 `resource_missing`, as at Stripe), and
 * `GET /v1/accounts` lists the connected accounts objects were put for. Every request needs `Authorization: Bearer <key>`
 * when the store has a key (401 otherwise). Injected faults answer first (429 `rate_limit`, 5xx
 * `api_error`). Everything else is 404 `invalid_request_error` "Unrecognized request URL".
 */
export function fakeStripeApi(store: FakeStripeStore): (request: Request) => Promise<Response> {
  return async (request) => {
    const url = new URL(request.url);
    const query: Query = {};
    for (const [k, v] of url.searchParams) query[k] = v;
    // Stripe-Account (classic Connect calls) or Stripe-Context (what stripe-node sends for a thin
    // notification's context): the account whose objects the request sees; none is the platform.
    const account = request.headers.get("stripe-account") ?? request.headers.get("stripe-context") ?? "";
    const answer = respond(store, request, url, query, account);
    store.requests.push({ method: request.method, path: url.pathname, query, status: answer.status, account });
    return answer;
  };
}

function respond(store: FakeStripeStore, request: Request, url: URL, q: Query, account: string): Response {
  if (store.apiKey !== undefined && request.headers.get("authorization") !== `Bearer ${store.apiKey}`)
    return stripeError(401, "invalid_request_error", "Invalid API Key provided.");
  const fault = store.takeFault(url.pathname);
  if (fault === 429) return stripeError(429, "invalid_request_error", "Request rate limit exceeded.", "rate_limit");
  if (fault !== undefined) return stripeError(fault, "api_error", "An unknown error occurred (injected).");
  const v2 = /^\/v2\/core\/events\/([A-Za-z0-9_]+)$/.exec(url.pathname);
  if (request.method === "GET" && v2) {
    const event = store.get(V2_EVENTS, v2[1]!, account);
    if (!event) return stripeError(404, "invalid_request_error", `No such event: '${v2[1]}'`, "resource_missing", "id");
    return json(200, event);
  }
  // Resources are one segment (`invoices`) or two (`checkout/sessions`), stored under that path.
  const m = /^\/v1\/((?:checkout\/)?[a-z_]+)(?:\/([A-Za-z0-9_]+))?$/.exec(url.pathname);
  if (request.method !== "GET" || !m)
    return stripeError(404, "invalid_request_error", `Unrecognized request URL (${request.method}: ${url.pathname}).`);
  const [, resource, id] = m as unknown as [string, string, string | undefined];
  if (id !== undefined) {
    // Only the account's own objects: another account's id is a 404 resource_missing, as at Stripe.
    const object = store.get(resource, id, account);
    if (!object || !store.holds(resource, object))
      return stripeError(404, "invalid_request_error", `No such ${resource.replace(/s$/, "")}: '${id}'`, "resource_missing", "id");
    return json(200, object);
  }
  const filterEvent = resource === "events" ? eventFilter(store, q) : undefined;
  if (filterEvent instanceof Response) return filterEvent;
  const all: StoredObject[] = [];
  const slot = FakeStripeStore.slot(resource, account);
  const held = (store.objects.get(slot) ?? []).filter((o) => store.holds(resource, o));
  for (const o of held) {
    const created = createdMatches(o.created, q);
    if (created instanceof Response) return created;
    if (!created) continue;
    if (filterEvent && !filterEvent(o)) continue;
    if (resource === "invoices" && q.status !== undefined && o.status !== q.status) continue;
    all.push(o);
  }
  // Newest first; same second: the later insertion first.
  const order = new Map((store.objects.get(slot) ?? []).map((o, i) => [o.id, i]));
  const newestFirst = (a: StoredObject, b: StoredObject) => b.created - a.created || (order.get(b.id) ?? 0) - (order.get(a.id) ?? 0);
  all.sort(newestFirst);
  return page(all, held.sort(newestFirst), q, `/v1/${resource}`);
}
