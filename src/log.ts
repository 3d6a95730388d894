/** One structured log line (JSON); never secrets, signature headers or payloads. */
export type LogFn = (line: Record<string, unknown>) => void;
