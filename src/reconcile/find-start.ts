// Where an oldest-first backfill begins: Stripe lists newest first and pages toward newer events only
// from a cursor (`ending_before`), so a window that starts at a time needs an event to start after.
import type { ListEvents } from "./stripe-events.ts";

/** The start of a window: the cursor to page from, and (when no event precedes the window) the window's first second read in full. */
export interface WindowStart {
  /** `ending_before` for the first page; undefined when the window holds no event at all. */
  cursor: string | undefined;
  /** Events (newest first, filtered) of the window's oldest second, to record before paging from `cursor`; empty when the cursor precedes the window. */
  firstSecond: Record<string, unknown>[];
  /** That second, Unix seconds (undefined when `firstSecond` is not used). */
  firstSecondSec: number | undefined;
}

/**
 * Finds where to page from for the window `[startSec, nowSec]`:
 * - the newest event (of any type) created before `startSec`, when Stripe still holds one: every
 *   event paged after it with `ending_before` is then in the window, same-second events included;
 * - else (the window starts before the oldest event Stripe holds: past its 30 days, or a new
 *   account) the oldest second in the window that holds an event, found by bisection over `created`
 *   ranges (about 22 calls for 30 days); its events are read in full (`created` equal to it, paged
 *   with `starting_after`), and its newest event becomes the cursor.
 * `pageSize` bounds each list call.
 */
export async function findWindowStart(list: ListEvents, startSec: number, nowSec: number, pageSize: number): Promise<WindowStart> {
  const before = await list({ limit: 1, created: { lt: startSec }, unfiltered: true });
  const anchor = before.data[0];
  if (anchor) return { cursor: String(anchor.id), firstSecond: [], firstSecondSec: undefined };
  const any = async (ltSec: number) => (await list({ limit: 1, created: { gte: startSec, lt: ltSec }, unfiltered: true })).data.length > 0;
  let lo = startSec + 1;
  let hi = Math.max(nowSec + 1, lo);
  if (!(await any(hi))) return { cursor: undefined, firstSecond: [], firstSecondSec: undefined };
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (await any(mid)) hi = mid;
    else lo = mid + 1;
  }
  const second = hi - 1;
  const newest = (await list({ limit: 1, created: second, unfiltered: true })).data[0];
  const firstSecond: Record<string, unknown>[] = [];
  for (let after: string | undefined; ;) {
    const page = await list({ limit: pageSize, created: second, startingAfter: after });
    firstSecond.push(...page.data);
    const last = page.data.at(-1);
    if (!page.hasMore || !last) break;
    after = String(last.id);
  }
  return { cursor: newest ? String(newest.id) : undefined, firstSecond, firstSecondSec: second };
}
