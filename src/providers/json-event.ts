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

/** The Date of an ISO 8601 timestamp text, or undefined when it is none. */
export function isoDate(value: unknown): Date | undefined {
  if (typeof value !== "string") return undefined;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? undefined : date;
}
