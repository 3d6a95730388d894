// Edge file: process signals for the Bun (and Node) entry files.

/** Where signals come from: `process` (Bun, Node), or an EventEmitter in tests. */
export interface SignalSource {
  on(signal: "SIGTERM" | "SIGINT", listener: () => void): unknown;
}

/** Default window within which a repeated Ctrl-C (SIGINT) is taken as the same stop request, ms. */
export const REPEAT_WINDOW_MS = 1_000;

/**
 * Calls `stop(signal)` on the first SIGTERM or SIGINT (graceful shutdown: stop taking work, finish
 * in-flight work). While that stop runs:
 * - a SIGTERM is ignored, however late: SIGTERM is what supervisors (systemd, Docker, Kubernetes),
 *   `kill` and `bun run`'s forwarding send, and a repeated one asks for the same stop (a supervisor
 *   that will not wait sends SIGKILL). Under `bun run` a signal to the process group reaches the script
 *   twice (once from the kernel, once forwarded by `bun run`), and on a loaded machine the copies are
 *   handled hundreds of ms apart, so no window could tell them from a deliberate second one.
 * - a SIGINT more than `repeatWindowMs` (default 1 s) after the first signal calls `exitNow()`: a person
 *   pressing Ctrl-C again to cut a slow shutdown short. One within the window is the duplicate Ctrl-C of
 *   `bun run` (about 2 ms apart at rest, measured with Bun 1.4.5; the window is measured when the
 *   handlers run, and a busy event loop delays them).
 * `now` returns ms and `source` defaults to `process` (both injectable for tests).
 */
export function onStopSignals(
  stop: (signal: "SIGTERM" | "SIGINT") => void,
  exitNow: () => void,
  options: { repeatWindowMs?: number; now?: () => number; source?: SignalSource } = {},
): void {
  const window = options.repeatWindowMs ?? REPEAT_WINDOW_MS;
  const now = options.now ?? Date.now;
  const source = options.source ?? process;
  let firstAt: number | undefined;
  const onSignal = (signal: "SIGTERM" | "SIGINT") => {
    if (firstAt === undefined) {
      firstAt = now();
      stop(signal);
    } else if (signal === "SIGINT" && now() - firstAt > window) {
      exitNow();
    }
  };
  source.on("SIGTERM", () => onSignal("SIGTERM"));
  source.on("SIGINT", () => onSignal("SIGINT"));
}
