import type { App } from "./app.ts";
import { AppError, errorResponse } from "../errors.ts";
import { RETRY_AFTER_SEC } from "./probes.ts";

/** A server's fetch before and after its database is ready; see {@link createStartingApp}. */
export interface StartingApp extends App {
  /** From now on every request goes to `app`. */
  ready(app: App): void;
}

/**
 * The fetch a server listens with while it waits for its database and applies migrations: `/healthz`
 * answers 200 (the process is alive, so an orchestrator does not restart it for a database outage),
 * every other request, `/readyz` and webhook deliveries included, answers 503 `database_unavailable`
 * with Retry-After and reads nothing, so a provider retries and nothing can be acknowledged before it
 * was recorded. Once {@link StartingApp.ready} is called, requests go to the real app.
 */
export function createStartingApp(): StartingApp {
  let app: App | undefined;
  return {
    ready(real) {
      app = real;
    },
    fetch(request) {
      // The app's own promise, not one more async layer around it: this runs for every request.
      if (app) return app.fetch(request);
      return Promise.resolve(startingResponse(request));
    },
  };
}

/** `/healthz` 200, anything else 503 `database_unavailable` with Retry-After (HEAD: no body). */
function startingResponse(request: Request): Response {
  const path = new URL(request.url).pathname;
  const response =
    path === "/healthz" && (request.method === "GET" || request.method === "HEAD")
      ? Response.json({ status: "ok" })
      : errorResponse(
          new AppError("database_unavailable", "Starting: waiting for the database and its migrations; nothing was recorded, retry later"),
          { "retry-after": RETRY_AFTER_SEC },
        );
  return request.method === "HEAD" ? new Response(null, { status: response.status, headers: response.headers }) : response;
}
