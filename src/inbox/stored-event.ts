import { PermanentError } from "../errors.ts";
import { jsonbCopy } from "../providers/jsonb-text.ts";

/**
 * The event a stored payload row is applied from: its `payload`; or, for a row kept with only its
 * `raw_body` because jsonb refused it (sql/0006: rows parked before 0010 and requeued), the body's
 * jsonb-storable copy (providers/jsonb-text.ts), made again at each read (payload rows are never
 * rewritten, sql/0027). Used by the worker and by replay.
 * @throws PermanentError when there is no payload and no copy can fix the raw body (a number beyond
 *   numeric's range, nesting too deep: no retry helps; an operator resolves it).
 */
export function storedEvent(
  payload: Record<string, unknown> | null | undefined,
  rawBody: string | null | undefined,
): { payload: Record<string, unknown> } {
  if (payload) return { payload };
  const copy = rawBody ? jsonbCopy(rawBody) : undefined;
  if (!copy)
    throw new PermanentError(
      "Cannot process: the event has no jsonb payload and its raw body holds no \\u0000 or lone surrogate to replace (a number out of range or nesting too deep?); resolve it by hand",
    );
  return { payload: JSON.parse(copy.json) as Record<string, unknown> };
}
