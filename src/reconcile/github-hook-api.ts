// GitHub's webhook-delivery endpoints as `reconcile github` uses them: list a hook's deliveries page by
// page, ask for one redelivery. Web APIs only (fetch), like the rest of src/reconcile/.

/** Where a hook is and how to reach GitHub's API for it ({@link readGitHubHook}). */
export interface GitHubHookSettings {
  /** The hook's API path without leading slash: `repos/<owner>/<repo>/hooks/<id>`, `orgs/<org>/hooks/<id>` or `app/hook`. */
  hook: string;
  /** The bearer token (never printed): a token with the "Webhooks" read and write permission, or the app's JWT for `app/hook`. */
  token: string;
  /** `GITHUB_API_BASE`, default `https://api.github.com`, no trailing slash. */
  apiBase: string;
  /** The variables the hook and token came from, for messages. */
  hookVar: string;
  tokenVar: string;
}

/** One delivery as listed (GitHub docs, "List deliveries for a repository webhook": the fields this command reads). */
export interface HookDelivery {
  /** This attempt's id: what a redelivery names. */
  id: number;
  /** The event's `X-GitHub-Delivery`: the inbox `event_id`, the same on every redelivery. */
  guid: string;
  /** ISO 8601. */
  delivered_at: string;
  redelivery: boolean;
  /** GitHub's description of the answer: `OK`, `Invalid HTTP Response: 503`, `timed out`. */
  status: string;
  /** The HTTP status the receiver answered; 0 or absent when none came. */
  status_code: number;
  event: string;
  action: string | null;
}

/** GitHub's API answered something other than success; `message` is GitHub's own (never the token). */
export class GitHubApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "GitHubApiError";
  }
}

const HOOK = /^(repos\/[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+\/hooks\/\d+|orgs\/[A-Za-z0-9_.-]+\/hooks\/\d+|app\/hook)$/;

/**
 * Reads the hook of GitHub endpoint `name` from `env`: `GITHUB_HOOK_<NAME>` (upper case, `-` → `_`),
 * one of `repos/<owner>/<repo>/hooks/<hook_id>`, `orgs/<org>/hooks/<hook_id>`, `app/hook`;
 * `GITHUB_TOKEN_<NAME>`; `GITHUB_API_BASE` (default `https://api.github.com`, http or https).
 * Returns the settings, or the list of problems (each naming its variable, never a token's value).
 */
export function readGitHubHook(env: Record<string, string | undefined>, name: string): GitHubHookSettings | string[] {
  const suffix = name.toUpperCase().replaceAll("-", "_");
  const hookVar = `GITHUB_HOOK_${suffix}`;
  const tokenVar = `GITHUB_TOKEN_${suffix}`;
  const problems: string[] = [];
  const hook = (env[hookVar] ?? "").trim().replace(/^\/+|\/+$/g, "");
  if (!hook) problems.push(`${hookVar} is required: repos/<owner>/<repo>/hooks/<hook_id>, orgs/<org>/hooks/<hook_id> or app/hook`);
  else if (!HOOK.test(hook))
    problems.push(
      `${hookVar} must be repos/<owner>/<repo>/hooks/<hook_id>, orgs/<org>/hooks/<hook_id> or app/hook, got "${hook.slice(0, 100)}"`,
    );
  const token = (env[tokenVar] ?? "").trim();
  if (!token) problems.push(`${tokenVar} is required (a token with the "Webhooks" read and write permission; a JWT for app/hook)`);
  else if (/\s/.test(token)) problems.push(`${tokenVar} must hold one token without whitespace`);
  const apiBase = (env.GITHUB_API_BASE || "https://api.github.com").replace(/\/+$/, "");
  let base: URL | undefined;
  try {
    base = new URL(apiBase);
  } catch {
    base = undefined;
  }
  if (!base || (base.protocol !== "https:" && base.protocol !== "http:"))
    problems.push(`GITHUB_API_BASE must be an http(s) URL, got "${apiBase}"`);
  return problems.length > 0 ? problems : { hook, token, apiBase, hookVar, tokenVar };
}

/** The headers of every call: GitHub's media type and API version, a User-Agent (GitHub refuses requests without one), the token. */
function headers(s: GitHubHookSettings): Headers {
  return new Headers({
    accept: "application/vnd.github+json",
    authorization: `Bearer ${s.token}`,
    "x-github-api-version": "2022-11-28",
    "user-agent": "webhook-inbox-reconcile",
  });
}

/** The `rel="next"` URL of a `Link` header, or undefined (GitHub docs, "Using pagination in the REST API"). */
export function nextLink(link: string | null): string | undefined {
  for (const part of (link ?? "").split(",")) {
    const m = /^\s*<([^>]+)>\s*;\s*rel="?next"?\s*$/.exec(part);
    if (m) return m[1];
  }
  return undefined;
}

/** Throws {@link GitHubApiError} for a non-2xx answer, with GitHub's `message` (at most 200 characters). */
async function check(response: Response, what: string): Promise<void> {
  if (response.ok) return;
  const body = await response.text().catch(() => "");
  let message = "";
  try {
    message = String((JSON.parse(body) as { message?: unknown }).message ?? "");
  } catch {
    message = "";
  }
  throw new GitHubApiError(response.status, `${what} answered ${response.status}${message ? ` "${message.slice(0, 200)}"` : ""}`);
}

/**
 * The hook's deliveries page by page, newest first (`GET /<hook>/deliveries?per_page=<pageSize>`, then
 * each `Link: rel="next"` URL; GitHub docs, "List deliveries for a repository webhook" and the org and
 * app variants). A next URL on another origin than `apiBase` is refused (the token is never sent
 * elsewhere). `fetchFn` defaults to the global fetch.
 * @throws GitHubApiError for a non-2xx answer (401 bad credentials, 404 unknown hook, 403/429 rate
 *   limited); Error for a body that is not an array or a foreign next URL.
 */
export async function* listDeliveries(
  s: GitHubHookSettings,
  pageSize = 100,
  fetchFn: typeof fetch = fetch,
): AsyncGenerator<HookDelivery[]> {
  let url: string | undefined = `${s.apiBase}/${s.hook}/deliveries?per_page=${pageSize}`;
  const origin = new URL(s.apiBase).origin;
  while (url) {
    if (new URL(url).origin !== origin) throw new Error(`GitHub's next page is on another origin (${new URL(url).origin}): not followed`);
    const response = await fetchFn(url, { headers: headers(s) });
    await check(response, `GET ${new URL(url).pathname}`);
    const page: unknown = await response.json();
    if (!Array.isArray(page)) throw new Error(`GET ${new URL(url).pathname} answered something other than a list of deliveries`);
    yield page as HookDelivery[];
    url = nextLink(response.headers.get("link"));
  }
}

/**
 * Asks GitHub to redeliver delivery `id` of the hook (`POST /<hook>/deliveries/<id>/attempts`, answered
 * 202 Accepted; GitHub docs, "Redeliver a delivery for a repository webhook"). GitHub sends it again with
 * the same `X-GitHub-Delivery`, so the inbox records it once whatever happens.
 * @throws GitHubApiError for a non-2xx answer.
 */
export async function redeliver(s: GitHubHookSettings, id: number, fetchFn: typeof fetch = fetch): Promise<void> {
  const response = await fetchFn(`${s.apiBase}/${s.hook}/deliveries/${id}/attempts`, { method: "POST", headers: headers(s) });
  await check(response, `POST /${s.hook}/deliveries/${id}/attempts`);
  await response.body?.cancel();
}
