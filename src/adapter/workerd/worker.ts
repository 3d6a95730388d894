// Entry file for Cloudflare workerd (Workers): `export default { fetch }`, bundled by
// src/adapter/workerd/miniflare.ts. postgres.js runs over `cloudflare:sockets`, which needs the
// `nodejs_compat` compatibility flag. Settings come from the Worker's `env` binding.
import { ConfigError } from "../../config.ts";
import { connectReceiver, loadServerConfig, receiverApp, type ServerConfig } from "../../runtime/receiver.ts";

/** The part of the Workers `ExecutionContext` this file uses. */
interface ExecutionContext {
  waitUntil(promise: Promise<unknown>): void;
}

// One checked configuration per env binding (workerd hands the same object to every request).
const configs = new WeakMap<object, ServerConfig>();

export default {
  async fetch(request: Request, env: Record<string, string | undefined>, ctx: ExecutionContext): Promise<Response> {
    let config = configs.get(env);
    if (!config) {
      try {
        config = loadServerConfig(env, "workerd");
      } catch (err) {
        console.error(err instanceof ConfigError ? err.message : err);
        return Response.json({ error: "misconfigured", message: "The receiver's settings are invalid; see its log" }, { status: 500 });
      }
      configs.set(env, config);
    }
    // A socket belongs to the request that opened it: a client kept across requests fails with
    // "Cannot perform I/O on behalf of a different request". So: one client per request, one connection,
    // closed after the response is sent. No migrations here (no file system): run `bun run migrate`.
    const db = connectReceiver(config.databaseUrl, config, "webhook-inbox workerd", 1);
    try {
      return await receiverApp(config, db).fetch(request);
    } finally {
      ctx.waitUntil(db.end({ timeout: 5 }));
    }
  },
};
