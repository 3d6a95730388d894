// Edge file: process signals for the Bun (and Node) entry files.

/** Where signals come from: `process` (Bun, Node), or an EventEmitter in tests. */
export interface SignalSource {
  on(signal: "SIGTERM" | "SIGINT", listener: () => void): unknown;
}

/** Default window within which a repeated signal is taken as the same stop request, ms. */
export const REPEAT_WINDOW_MS = 250;

/**
 * Calls `stop(signal)` on the first SIGTERM or SIGINT (graceful shutdown: stop taking work, finish
 * in-flight work) and `exitNow()` on a later one, so an operator can cut a slow shutdown short.
 * A signal arriving within `repeatWindowMs` (default 250 ms) of the first is ignored: under `bun run`,
 * Ctrl-C reaches the script twice (the terminal signals the whole foreground process group and
 * `bun run` forwards its own copy, about 2 ms apart, measured with Bun 1.4.5), which would otherwise
 * turn every Ctrl-C into an abrupt exit. `now` returns ms and `source` defaults to `process`
 * (both injectable for tests).
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
    } else if (now() - firstAt > window) {
      exitNow();
    }
  };
  source.on("SIGTERM", () => onSignal("SIGTERM"));
  source.on("SIGINT", () => onSignal("SIGINT"));
}
