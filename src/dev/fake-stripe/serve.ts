// Serves the fake Stripe API (app.ts) on loopback with Bun.serve, for tests, chaos and local trials.
import { fakeStripeApi } from "./app.ts";
import { FakeStripeStore } from "./store.ts";

/** A running fake: its base URL (for `STRIPE_API_BASE`), its state, and how to stop it. */
export interface RunningFakeStripe {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  store: FakeStripeStore;
  stop(): Promise<void>;
}

/**
 * Starts the fake Stripe API on 127.0.0.1 (`port` 0 picks a free one). `store` defaults to an empty
 * one accepting any key.
 */
export function startFakeStripe(options: { port?: number; store?: FakeStripeStore } = {}): RunningFakeStripe {
  const store = options.store ?? new FakeStripeStore();
  const server = Bun.serve({ hostname: "127.0.0.1", port: options.port ?? 0, fetch: fakeStripeApi(store) });
  return { url: `http://127.0.0.1:${server.port}`, store, stop: () => server.stop(true) };
}
