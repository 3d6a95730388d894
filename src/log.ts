/**
 * One structured log line: plain JSON values, never secrets, signature headers or payloads. It may name
 * its own `level` and `message`; {@link jsonLines} adds what it leaves out, and `time`.
 */
export type LogFn = (line: Record<string, unknown>) => void;

/** Severity, lowest first (the names of OpenTelemetry's log data model severity ranges, lower case). */
export type LogLevel = "debug" | "info" | "warn" | "error";

const RANKS: Readonly<Record<LogLevel, number>> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * `LOG_LEVEL` (`debug`, `info`, `warn` or `error`; default `info`, also when empty): lines below it are not written.
 * @throws Error naming the variable and the value when it is none of those.
 */
export function readLogLevel(env: Record<string, string | undefined>): LogLevel {
  const value = env.LOG_LEVEL || "info"; // empty counts as unset, like every other setting
  if (!Object.hasOwn(RANKS, value)) throw new Error(`LOG_LEVEL must be debug, info, warn or error, got "${value}"`);
  return value as LogLevel;
}

/**
 * A {@link LogFn} writing one JSON object per line through `write` (default `console.log`): the line's
 * own fields first (so a line still starts `{"worker":"started"…`), then `level` (the line's, else
 * `info`), `time` (ISO 8601, UTC, ms) and `message` (the line's, else its first field and value, e.g.
 * `worker started`). Lines below `level` are dropped.
 */
export function jsonLines(options: { level?: LogLevel; write?: (text: string) => void; now?: () => Date } = {}): LogFn {
  const min = RANKS[options.level ?? "info"];
  const write = options.write ?? ((text: string) => console.log(text));
  const now = options.now ?? (() => new Date());
  return (line) => {
    const level = typeof line.level === "string" && Object.hasOwn(RANKS, line.level) ? (line.level as LogLevel) : "info";
    if (RANKS[level] < min) return;
    const [first] = Object.entries(line);
    const message = typeof line.message === "string" ? line.message : first ? `${first[0]} ${typeof first[1] === "string" ? first[1] : ""}`.trim() : "";
    write(JSON.stringify({ ...line, level, time: now().toISOString(), message }));
  };
}
