import { AppError } from "../errors.ts";
import { jsonbCopy } from "./jsonb-text.ts";
import type { VerifiedEvent } from "./provider.ts";

/** What a provider reads from a verified body's parsed JSON object: id, type, subject and, when it has them, time and mode. */
export type EventFields = Pick<VerifiedEvent, "id" | "type" | "subject"> & Partial<Pick<VerifiedEvent, "createdAt" | "livemode">>;

/**
 * The verified event of a JSON body: parsed once, `read` takes the fields from the object (undefined
 * when it is not an event of the provider). A body PostgreSQL's jsonb refuses (`\u0000`, a lone
 * surrogate escape: jsonb-text.ts) is read from its storable copy, which becomes the stored payload;
 * `sanitized.typeChanged` says whether the type read differs. `what` names the expected shape in the
 * refusal, e.g. "a GitHub webhook payload: a JSON object".
 * @throws AppError `invalid_event` when the body is not a JSON object or `read` returns undefined.
 */
export function jsonEvent(body: string, what: string, read: (payload: Record<string, unknown>) => EventFields | undefined): VerifiedEvent {
  const fields = readFields(body, what, read);
  const copy = jsonbCopy(body);
  if (!copy) return { ...fields, body };
  const clean = readFields(copy.json, what, read);
  return { ...clean, body, sanitized: { ...copy, typeChanged: clean.type !== fields.type } };
}

function readFields(json: string, what: string, read: (payload: Record<string, unknown>) => EventFields | undefined) {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    parsed = undefined;
  }
  const payload = isObject(parsed) ? parsed : undefined;
  const fields = payload ? read(payload) : undefined;
  if (!payload || !fields) throw new AppError("invalid_event", `Signed body is not ${what}`);
  return { ...fields, payload };
}

/** True for a plain JSON object (not null, not an array). */
export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A non-empty string of at most `max` characters, or undefined. */
export function text(value: unknown, max = 255): string | undefined {
  return typeof value === "string" && value.length > 0 && value.length <= max ? value : undefined;
}

/** An RFC 3339 date-time: date, `T` (or a space), time with optional fraction, then `Z`, an offset, or nothing. */
const RFC3339 = /^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2}(?:\.\d+)?)([Zz]|[+-]\d{2}:\d{2})?$/;

/**
 * The Date of an RFC 3339 timestamp text (RFC 3339 §5.6, the form Paddle sends: `2024-04-12T10:18:49.621022Z`),
 * or undefined when it is none. A time written without an offset is read as UTC, never in the process's
 * own time zone, so every receiver reads one text as one instant whatever its `TZ`; fractions beyond
 * milliseconds are cut (JavaScript's Date holds ms). Any other text, even one `Date` would parse, is none.
 */
export function isoDate(value: unknown): Date | undefined {
  if (typeof value !== "string") return undefined;
  const m = RFC3339.exec(value);
  if (!m) return undefined;
  const [, day, time, zone] = m;
  const fraction = /\.(\d+)$/.exec(time!)?.[1];
  const whole = fraction === undefined ? time! : `${time!.slice(0, time!.indexOf("."))}.${fraction.slice(0, 3).padEnd(3, "0")}`;
  const date = new Date(`${day}T${whole}${zone === undefined || zone.toUpperCase() === "Z" ? "Z" : zone}`);
  return Number.isNaN(date.getTime()) ? undefined : date;
}
