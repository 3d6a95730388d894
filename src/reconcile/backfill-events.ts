// Event backfill: Stripe's Events API, oldest first, into the same inbox as webhook deliveries.
import { inSpan, type Telemetry } from "../telemetry.ts";
import type { Db, Tx } from "../db/db.ts";
import type { Backoff } from "../inbox/inbox.ts";
import { stripeApiEvent, STRIPE_EVENTS_KEPT_MS } from "../providers/stripe.ts";
import type { Mode, ReceiveTarget, refusalOf } from "../receiver/receive.ts";
import { advanceCheckpoint, readCheckpoint, releaseLease, takeLease, type Advance, type CheckpointKey } from "./checkpoint.ts";
import { findWindowStart } from "./find-start.ts";
import { noCounts, recordPage, type PageCounts } from "./record-page.ts";
import type { ListEvents } from "./stripe-events.ts";

/** Stripe keeps events for 30 days (API reference, "List all events"). */
export const EVENT_RETENTION_DAYS = STRIPE_EVENTS_KEPT_MS / 86_400_000;
/** Window of a run without `since` and without a checkpoint: Stripe's three days of webhook retries. */
export const DEFAULT_WINDOW_SEC = 3 * 86_400;
/**
 * How far before the newest event it recorded (the checkpoint's cursor) a run starts again, seconds:
 * an event Stripe lists only after a newer one was paged (list consistency) is still read; reading an
 * event twice costs an API read, never a second effect (the inbox key).
 */
export const OVERLAP_SEC = 300;
/** Largest page Stripe lists (and the default). */
export const MAX_PAGE_SIZE = 100;

/** What {@link backfillEvents} needs. Times are Unix milliseconds unless named `…Sec`. */
export interface BackfillOptions {
  db: Db;
  list: ListEvents;
  /** The endpoint: inbox key's provider and endpoint, its handler table, and its mode. */
  target: ReceiveTarget;
  mode: Mode;
  /** Hybrid fallback's first retry delay and cap (the receiver's). */
  backoff: Backoff;
  /** The endpoint's Stripe mode (true live, false test; undefined accepts both) and Connect flag: what {@link refusalOf} checks, as for a webhook. */
  livemode?: boolean;
  connect?: boolean;
  /**
   * The account whose events to read: a connected account's id (`acct_…`: every list call is made as it,
   * `Stripe-Account`, and every event is recorded under it) or `""`/undefined for the platform's own.
   * The checkpoint and its lease are this account's (key (provider, endpoint, account)).
   */
  account?: string;
  /** Window start; default {@link OVERLAP_SEC} before the checkpoint's newest event (else its `covered_until`), else {@link DEFAULT_WINDOW_SEC} ago. */
  since?: Date;
  /** The run lists with `types` or `delivery_success=false`: it records what it finds but leaves the checkpoint alone (it does not cover every event). */
  filtered?: boolean;
  /** Count new vs already recorded; write nothing (no rows, no checkpoint, no lease). */
  dryRun?: boolean;
  /** Events per list call, 1–100 (default 100). */
  pageSize?: number;
  /** Lease holder name (unique per process and run) and lease length (default 60000 ms; renewed by every page, so a killed run blocks the next for at most this long). */
  owner: string;
  leaseMs?: number;
  now?: () => number;
  /** Told after each page. */
  onPage?: (progress: PageProgress) => void;
  /** Stops after the current page (the checkpoint then says how far the run got). */
  signal?: AbortSignal;
  /** OpenTelemetry: the run is one `backfill <endpoint>` span with its counts (src/telemetry.ts). Default: none. */
  telemetry?: Telemetry;
}

/** One page's progress. */
export interface PageProgress {
  page: number;
  events: number;
  /** Recorded by this page (would be, with dryRun). */
  fresh: number;
  alreadyRecorded: number;
  /** `created` of the newest event of the page, Unix seconds. */
  newestCreatedSec: number;
}

/** The end of a run, for the terminal and `--json`. Times are ISO strings. */
export interface BackfillSummary {
  endpoint: string;
  /** The account read: `acct_…`, or `""` for the platform. */
  account: string;
  /** `busy`: another process holds the endpoint's lease (nothing was done). */
  status: "done" | "interrupted" | "busy";
  dryRun: boolean;
  pages: number;
  events: number;
  fresh: number;
  alreadyRecorded: number;
  outcomes: PageCounts;
  /** Window start actually read (after the 30-day edge) and the end (when listing began). */
  from: string | null;
  to: string;
  /** Set when the window began before the events Stripe still holds: that interval cannot be backfilled. */
  unrecoverable: { from: string; to: string } | null;
  /** The checkpoint's `covered_until` after the run. */
  coveredUntil: string | null;
}

const iso = (sec: number) => new Date(sec * 1000).toISOString();

/**
 * Reads Stripe's events oldest first and records each in the inbox under the key a webhook delivery
 * uses, through the endpoint's mode (record-page.ts), one event per transaction together with the
 * move of the endpoint's checkpoint (checkpoint.ts) up to it, so a run killed at any moment and run again leaves no gap
 * and applies nothing twice. A run starts {@link OVERLAP_SEC} before the newest event the checkpoint
 * recorded (its cursor; else its `covered_until`), or at `since`; pages go oldest first with `ending_before` from the event just before the window
 * (find-start.ts), then from each page's newest event; same-second events are never skipped because
 * the cursor is an event, not a time. A window starting before the 30 days Stripe keeps is cut at
 * that edge and the lost interval is returned in `unrecoverable` (never silently).
 * An unfiltered, non-dry run holds the lease of its (endpoint, account) checkpoint for its duration
 * (`busy` when another process has it) and gives it back at the end. With `account` set, every read
 * is made as that connected account and its events are recorded under it; each event then passes
 * the receiver's mode and Connect checks ({@link refusalOf}: `ignored_mode`, needs-review).
 * @throws stripe-node errors after their retries; database errors; a sync-mode handler failure that
 *   survived three tries of its event (that event rolled back; the checkpoint is just before it).
 */
export function backfillEvents(options: BackfillOptions): Promise<BackfillSummary> {
  const spec = {
    name: `backfill ${options.target.endpoint}`,
    attributes: {
      "messaging.system": options.target.provider,
      "messaging.destination.name": options.target.endpoint,
      "webhook_inbox.account": options.account ?? "",
      "webhook_inbox.dry_run": options.dryRun === true,
    },
  };
  return inSpan(options.telemetry, spec, async (span) => {
    const summary = await backfillUntraced(options);
    span?.setAttributes({
      "webhook_inbox.backfill.status": summary.status,
      "webhook_inbox.backfill.events": summary.events,
      "webhook_inbox.backfill.fresh": summary.fresh,
    });
    return summary;
  });
}

async function backfillUntraced(options: BackfillOptions): Promise<BackfillSummary> {
  const { db, target } = options;
  const account = options.account ?? "";
  const key: CheckpointKey = { provider: target.provider, endpoint: target.endpoint, account };
  // Every read of the run, the window search included, is made as the account.
  const list: ListEvents = (call) => options.list({ ...call, account });
  const policy = { name: target.endpoint, handlers: target.handlers, livemode: options.livemode, connect: options.connect };
  const now = options.now ?? Date.now;
  const pageSize = Math.min(Math.max(1, options.pageSize ?? MAX_PAGE_SIZE), MAX_PAGE_SIZE);
  const leaseMs = options.leaseMs ?? 60_000;
  const moves = !options.filtered && !options.dryRun;
  const nowSec = Math.floor(now() / 1000);
  const horizonSec = nowSec - EVENT_RETENTION_DAYS * 86_400;
  const summary: BackfillSummary = {
    endpoint: target.endpoint,
    account,
    status: "done",
    dryRun: options.dryRun === true,
    pages: 0,
    events: 0,
    fresh: 0,
    alreadyRecorded: 0,
    outcomes: noCounts(),
    from: null,
    to: iso(nowSec),
    unrecoverable: null,
    coveredUntil: null,
  };
  if (moves && !(await takeLease(db, key, options.owner, leaseMs))) return { ...summary, status: "busy" };
  try {
    const checkpoint = await readCheckpoint(db, key);
    const seconds = (d: Date | null) => (d ? Math.floor(d.getTime() / 1000) : undefined);
    // Everything before `safeSec` is recorded already (or is the caller's business, with `since`).
    const resumeSec = seconds(checkpoint.cursorCreated) ?? seconds(checkpoint.coveredUntil);
    const safeSec = options.since ? Math.floor(options.since.getTime() / 1000) : (resumeSec ?? nowSec - DEFAULT_WINDOW_SEC);
    const requestedSec = options.since || resumeSec === undefined ? safeSec : safeSec - OVERLAP_SEC;
    let startSec = requestedSec;
    if (startSec < horizonSec) {
      if (safeSec < horizonSec) summary.unrecoverable = { from: iso(safeSec), to: iso(horizonSec) };
      startSec = horizonSec;
    }
    summary.from = iso(startSec);
    // Only a run that starts where the checkpoint's coverage ends (or before) may move it; an interval
    // lost past the 30 days is reported, not waited for.
    const advance = (tx: Tx, to: Omit<Advance, "startSec">) =>
      moves ? advanceCheckpoint(tx, key, options.owner, leaseMs, { ...to, startSec: requestedSec }) : Promise.resolve(true);
    // Each event's transaction moves the checkpoint up to that event; the page's newest event moves it
    // to where the page leaves it (`page`: its cursor and covered_until).
    const record = async (newestFirst: Record<string, unknown>[], page: Omit<Advance, "startSec">) => {
      const oldestFirst = newestFirst.toReversed();
      // The account the run reads as is the events' account, whatever the listed object says.
      const events = oldestFirst.map((e) => ({ ...stripeApiEvent(e), account }));
      const upTo = (tx: Tx, i: number) => {
        if (i === events.length - 1) return advance(tx, page);
        const created = Number(oldestFirst[i]!.created);
        return advance(tx, { cursorEventId: events[i]!.id, cursorCreatedSec: created, coveredUntilSec: created });
      };
      const counts = options.dryRun
        ? await dryCounts(
            db,
            target,
            events.map((e) => e.id),
          )
        : await recordPage(db, target, options.mode, options.backoff, events, upTo, policy);
      const duplicate = counts.duplicate;
      const fresh = events.length - duplicate;
      summary.pages++;
      summary.events += events.length;
      summary.fresh += fresh;
      summary.alreadyRecorded += duplicate;
      for (const [k, v] of Object.entries(counts)) summary.outcomes[k as keyof PageCounts] += v;
      options.onPage?.({
        page: summary.pages,
        events: events.length,
        fresh,
        alreadyRecorded: duplicate,
        newestCreatedSec: page.cursorCreatedSec,
      });
    };
    const start = await findWindowStart(list, startSec, nowSec, pageSize);
    let cursor = start.cursor;
    if (start.firstSecondSec !== undefined && cursor !== undefined) {
      const s = start.firstSecondSec;
      await record(start.firstSecond, { cursorEventId: cursor, cursorCreatedSec: s, coveredUntilSec: s });
    }
    let lastCreated = startSec;
    while (cursor !== undefined) {
      if (options.signal?.aborted) return { ...summary, status: "interrupted", coveredUntil: await covered(db, key) };
      const page = await list({ limit: pageSize, endingBefore: cursor });
      const newest = page.data[0];
      if (!newest) break;
      lastCreated = Number(newest.created);
      cursor = String(newest.id);
      await record(page.data, {
        cursorEventId: cursor,
        cursorCreatedSec: lastCreated,
        coveredUntilSec: page.hasMore ? lastCreated : nowSec,
      });
      if (!page.hasMore) return { ...summary, coveredUntil: await covered(db, key) };
    }
    // Nothing newer than the cursor: everything listed when the run began is covered.
    if (moves && cursor !== undefined) {
      const to = { cursorEventId: cursor, cursorCreatedSec: lastCreated, coveredUntilSec: nowSec };
      await recordPage(db, target, options.mode, options.backoff, [], (tx) => advance(tx, to), policy);
    } else if (moves && cursor === undefined) await coverEmptyWindow(options, key, requestedSec, nowSec);
    return { ...summary, coveredUntil: await covered(db, key) };
  } finally {
    if (moves) await releaseLease(db, key, options.owner).catch(() => {});
  }
}

/** A window with no event at all is covered up to now (no cursor yet: the checkpoint keeps its old one). */
async function coverEmptyWindow(options: BackfillOptions, key: CheckpointKey, startSec: number, nowSec: number): Promise<void> {
  await options.db`
    update event_backfill_checkpoints
       set covered_until = to_timestamp(${nowSec}), updated_at = now()
     where (provider, endpoint, account) = (${key.provider}, ${key.endpoint}, ${key.account ?? ""})
       and lease_owner = ${options.owner}
       and (covered_until is null or covered_until >= to_timestamp(${startSec}))
       and (covered_until is null or covered_until < to_timestamp(${nowSec}))
  `;
}

async function covered(db: Db, key: CheckpointKey): Promise<string | null> {
  return (await readCheckpoint(db, key)).coveredUntil?.toISOString() ?? null;
}

/** What a page would do: keys already in the inbox are `duplicate`; the rest are counted as `processed` (new). */
async function dryCounts(db: Db, target: ReceiveTarget, ids: string[]): Promise<PageCounts> {
  const rows = await db<{ event_id: string }[]>`
    select event_id
      from webhook_inbox
     where provider = ${target.provider}
       and endpoint = ${target.endpoint}
       and event_id = any(${ids}::text[])
  `;
  return { ...noCounts(), duplicate: rows.length, processed: ids.length - rows.length };
}
