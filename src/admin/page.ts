// The frame of every admin answer: security headers, the page layout and the plain-text refusals.
import { html, type Html } from "./html.ts";

/**
 * Headers on every admin response: no script at all, no framing, no caching, no referrer to other
 * sites. `same-origin` rather than `no-referrer`: under `no-referrer` Chromium sends `Origin: null` on
 * the page's own form POSTs, which the same-origin check must refuse.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy":
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "cache-control": "no-store",
  "referrer-policy": "same-origin",
};

/** The realm browsers show in their sign-in prompt. */
export const REALM = "webhook-inbox admin";

/** A whole admin page: `title` (escaped), the navigation, `body`; `readonly` adds a banner. Status default 200. */
export function page(title: string, body: Html, options: { status?: number; readonly?: boolean } = {}): Response {
  const doc = html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · webhook-inbox admin</title>
        <link rel="stylesheet" href="/admin/admin.css" />
      </head>
      <body>
        <header>
          <nav>
            <strong>webhook-inbox</strong> <a href="/admin">Overview</a> <a href="/admin/events">Events</a>
            <a href="/admin/events?state=needs_review">Needs review</a> <a href="/admin/outbox">Outbox</a>${
              options.readonly ? html` <span class="badge">read-only</span>` : false
            }
          </nav>
        </header>
        <main>
          <h1>${title}</h1>
          ${body}
        </main>
      </body>
    </html> `;
  return new Response(doc.markup, {
    status: options.status ?? 200,
    headers: { "content-type": "text/html; charset=utf-8", ...SECURITY_HEADERS },
  });
}

/** A short plain-text answer (401, 403, 404) with the security headers and `extra` headers. */
export function plain(status: number, text: string, extra: Record<string, string> = {}): Response {
  return new Response(`${text}\n`, { status, headers: { "content-type": "text/plain; charset=utf-8", ...SECURITY_HEADERS, ...extra } });
}

/** 401 for missing or wrong credentials: the Basic challenge and nothing else. */
export function unauthorized(): Response {
  return plain(401, "Unauthorized", { "www-authenticate": `Basic realm="${REALM}"` });
}
