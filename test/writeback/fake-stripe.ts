// A fake Stripe API on 127.0.0.1 (random port) for write-back tests: `POST /v1/customers/:id` and
// `POST /v1/invoices/:id` update an object's metadata, with Stripe's Idempotency-Key semantics
// (Stripe docs, "Idempotent requests"): a finished request's status and body are stored under its key
// and replayed for the same key (`Idempotent-Replayed: true`) without performing the effect again; a
// concurrent request with a key still in flight gets 409; the same key with other parameters gets
// 400. `forgetKeys()` drops every stored key, as Stripe may after 24 hours. It counts every request it
// receives and every effect it performs.

/** One request as the fake saw it. */
export interface SeenRequest {
  method: string;
  path: string;
  idempotencyKey: string | null;
  /** Answered from the key store, without performing the effect. */
  replayed: boolean;
  status: number;
}

interface StoredObject {
  id: string;
  object: "customer" | "invoice";
  metadata: Record<string, string>;
  /** Metadata updates performed: the effect that must happen once. */
  updates: number;
}

interface StoredResponse {
  fingerprint: string;
  status: number;
  body: string;
}

export interface FakeStripe {
  /** Port to give stripe-node (`{ host: "127.0.0.1", port, protocol: "http" }`). */
  port: number;
  requests: SeenRequest[];
  /** Effects performed across all objects. */
  effects(): number;
  object(id: string): StoredObject | undefined;
  /** Creates a customer (`cus_…`) or an invoice (`in_…`) that requests may then update. */
  seed(id: string): void;
  /** Drops every stored idempotency key: a later request with an old key is executed as new. */
  forgetKeys(): void;
  stop(): Promise<void>;
}

const RESOURCES: Record<string, StoredObject["object"]> = { customers: "customer", invoices: "invoice" };

/** Starts the fake. `delayMs` holds each executing request open that long (to make requests overlap). */
export function startFakeStripe(options: { delayMs?: number } = {}): FakeStripe {
  const objects = new Map<string, StoredObject>();
  const keys = new Map<string, StoredResponse>();
  const inFlight = new Set<string>();
  const requests: SeenRequest[] = [];

  async function handle(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const key = request.headers.get("idempotency-key");
    const body = await request.text();
    const seen: SeenRequest = { method: request.method, path: url.pathname, idempotencyKey: key, replayed: false, status: 0 };
    requests.push(seen);
    const answer = (status: number, json: unknown, headers: Record<string, string> = {}) => {
      seen.status = status;
      return new Response(typeof json === "string" ? json : JSON.stringify(json), {
        status,
        headers: { "content-type": "application/json", ...headers },
      });
    };
    if (!request.headers.get("authorization")?.startsWith("Bearer sk_test_")) {
      return answer(401, { error: { type: "invalid_request_error", message: "Invalid API Key provided" } });
    }
    const fingerprint = `${request.method} ${url.pathname} ${body}`;
    if (key) {
      const stored = keys.get(key);
      if (stored) {
        if (stored.fingerprint !== fingerprint) {
          return answer(400, {
            error: {
              type: "idempotency_error",
              message: "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            },
          });
        }
        seen.replayed = true;
        return answer(stored.status, stored.body, { "idempotent-replayed": "true" });
      }
      if (inFlight.has(key)) {
        return answer(409, {
          error: {
            type: "idempotency_error",
            message: "There is currently another in-progress request using this Stripe API key and idempotency key.",
          },
        });
      }
      inFlight.add(key);
    }
    try {
      if (options.delayMs) await Bun.sleep(options.delayMs);
      const [status, json] = execute(request.method, url.pathname, new URLSearchParams(body));
      const text = JSON.stringify(json);
      if (key) keys.set(key, { fingerprint, status, body: text });
      return answer(status, text);
    } finally {
      if (key) inFlight.delete(key);
    }
  }

  function execute(method: string, path: string, params: URLSearchParams): [number, unknown] {
    const match = /^\/v1\/(customers|invoices)\/([A-Za-z0-9_]+)$/.exec(path);
    if (method !== "POST" || !match)
      return [404, { error: { type: "invalid_request_error", message: `Unrecognized request URL (${method}: ${path})` } }];
    const resource = RESOURCES[match[1] as string];
    const target = objects.get(match[2] as string);
    if (!target || target.object !== resource) {
      return [404, { error: { type: "invalid_request_error", code: "resource_missing", message: `No such ${resource}: '${match[2]}'` } }];
    }
    for (const [name, value] of params) {
      const field = /^metadata\[(.+)\]$/.exec(name);
      if (field?.[1]) target.metadata[field[1]] = value;
    }
    target.updates += 1;
    return [200, { id: target.id, object: target.object, metadata: { ...target.metadata } }];
  }

  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: handle });
  return {
    port: server.port as number,
    requests,
    effects: () => [...objects.values()].reduce((n, o) => n + o.updates, 0),
    object: (id) => objects.get(id),
    seed(id) {
      objects.set(id, { id, object: id.startsWith("in_") ? "invoice" : "customer", metadata: {}, updates: 0 });
    },
    forgetKeys: () => keys.clear(),
    stop: () => server.stop(true),
  };
}
