// Serves the fake GitHub API (app.ts) on loopback with Bun.serve, for tests and local trials.
import { fakeGitHubApi } from "./app.ts";
import { FakeGitHubStore } from "./store.ts";

/** A running fake: its base URL (for `GITHUB_API_BASE`), its state, and how to stop it. */
export interface RunningFakeGitHub {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  store: FakeGitHubStore;
  stop(): Promise<void>;
}

/** Starts the fake GitHub API on 127.0.0.1 (`port` 0 picks a free one); `store` defaults to an empty one accepting any token. */
export function startFakeGitHub(options: { port?: number; store?: FakeGitHubStore } = {}): RunningFakeGitHub {
  const store = options.store ?? new FakeGitHubStore();
  const server = Bun.serve({ hostname: "127.0.0.1", port: options.port ?? 0, fetch: fakeGitHubApi(store) });
  return { url: `http://127.0.0.1:${server.port}`, store, stop: () => server.stop(true) };
}
