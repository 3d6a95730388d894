// A local stand-in for the part of GitHub's REST API that `reconcile github` uses, as a Web-standard
// fetch app. It follows GitHub docs, "REST API endpoints for repository webhooks" / "… organization
// webhooks" / "… GitHub App webhooks": `GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries`,
// `GET /orgs/{org}/hooks/{hook_id}/deliveries`, `GET /app/hook/deliveries` (newest first, `per_page`
// 1–100, default 30, the next page's `cursor` in the `Link` header's `rel="next"` URL) and `POST
// …/deliveries/{delivery_id}/attempts` (202 Accepted), with "Using pagination in the REST API" and
// GitHub's error bodies (`{ message, documentation_url, status }`: 401 "Bad credentials", 404 "Not Found").
import type { FakeDelivery, FakeGitHubStore } from "./store.ts";

const json = (status: number, body: unknown, headers: Record<string, string> = {}): Response =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json; charset=utf-8", ...headers } });

const error = (status: number, message: string): Response =>
  json(status, { message, documentation_url: "https://docs.github.com/rest", status: String(status) });

const HOOK = String.raw`(repos/[^/]+/[^/]+/hooks/\d+|orgs/[^/]+/hooks/\d+|app/hook)`;
const LIST = new RegExp(`^/${HOOK}/deliveries$`);
const ATTEMPT = new RegExp(`^/${HOOK}/deliveries/(\\d+)/attempts$`);

/**
 * The fake's fetch handler. Every request needs `Authorization: Bearer <token>` when the store has a
 * token (401 "Bad credentials" otherwise); an unknown hook or delivery is a 404 "Not Found". The cursor
 * is the id of the last delivery of the previous page (GitHub's is opaque: clients only follow it).
 */
export function fakeGitHubApi(store: FakeGitHubStore): (request: Request) => Promise<Response> {
  return async (request) => {
    const url = new URL(request.url);
    const answer = await respond(store, request, url);
    store.requests.push({ method: request.method, path: url.pathname + url.search, status: answer.status });
    return answer;
  };
}

async function respond(store: FakeGitHubStore, request: Request, url: URL): Promise<Response> {
  if (store.token !== undefined && request.headers.get("authorization") !== `Bearer ${store.token}`) return error(401, "Bad credentials");
  const list = LIST.exec(url.pathname);
  if (request.method === "GET" && list) {
    const deliveries = store.hooks.get(list[1]!);
    if (!deliveries) return error(404, "Not Found");
    const perPage = Number(url.searchParams.get("per_page") ?? "30");
    if (!Number.isInteger(perPage) || perPage < 1 || perPage > 100) return error(422, "per_page must be 1 to 100");
    const newestFirst = [...deliveries].reverse();
    const cursor = url.searchParams.get("cursor");
    const from = cursor === null ? 0 : newestFirst.findIndex((d) => String(d.id) === cursor) + 1;
    if (from === 0 && cursor !== null) return error(422, "Invalid cursor");
    const page = newestFirst.slice(from, from + perPage);
    const headers: Record<string, string> = {};
    if (from + perPage < newestFirst.length) {
      const next = new URL(url);
      next.searchParams.set("cursor", String(page[page.length - 1]!.id));
      headers.link = `<${next.href}>; rel="next"`;
    }
    return json(200, page, headers);
  }
  const attempt = ATTEMPT.exec(url.pathname);
  if (request.method === "POST" && attempt) {
    const hook = attempt[1]!;
    const delivery = store.hooks.get(hook)?.find((d) => String(d.id) === attempt[2]);
    if (!delivery) return error(404, "Not Found");
    store.redelivered.push(delivery.id);
    if (store.redeliver) await redeliver(store, hook, delivery);
    return json(202, {});
  }
  return error(404, "Not Found");
}

/** Sends `delivery` again through `store.redeliver` and lists the attempt as a new delivery of the same guid. */
async function redeliver(store: FakeGitHubStore, hook: string, delivery: FakeDelivery): Promise<void> {
  const status = await store.redeliver!(hook, delivery);
  const { id: _id, ...rest } = delivery;
  store.add(hook, {
    ...rest,
    redelivery: true,
    delivered_at: new Date().toISOString(),
    status_code: status,
    status: status >= 200 && status < 300 ? "OK" : status === 0 ? "failed to connect" : `Invalid HTTP Response: ${status}`,
  });
}
