// Automatic catch-up: `serve` and `worker` backfill events by themselves after downtime and on a schedule.
import type { Telemetry } from "../telemetry.ts";
import type { Db, Tx } from "../db/db.ts";
import { sleep } from "../db/sleep.ts";
import type { Backoff } from "../inbox/inbox.ts";
import type { LogFn } from "../log.ts";
import type { Endpoint } from "../receiver/app.ts";
import { migratingHandlersFor } from "../receiver/endpoints.ts";
import type { Mode, ReceiveTarget } from "../receiver/receive.ts";
import { backfillEvents, type BackfillSummary } from "./backfill-events.ts";
import { STRIPE_EVENTS_KEPT_MS } from "../providers/stripe.ts";
import type { ListEvents } from "./stripe-events.ts";
import { finishBackfillRequest, takeBackfillRequest, type BackfillRequest } from "../handlers/backfill-requests.ts";

/** One endpoint catch-up backfills. */
export interface CatchUpEndpoint {
  target: ReceiveTarget;
  mode: Mode;
  backoff: Backoff;
  /** The endpoint's Stripe mode (true live, false test; undefined accepts both), checked on every event as for a webhook. */
  livemode?: boolean;
  /** Declared Connect: the catch-up also reads each connected account it knows ({@link knownAccounts}). */
  connect?: boolean;
}

/**
 * Where event backfill (`reconcile events`, the worker's catch-up) records a configured Stripe
 * endpoint's events: its own provider, handlers and mode; for a thin endpoint, the classic `stripe`
 * provider with the change-once handlers under the thin endpoint's name, in async mode. The Events
 * API lists classic events: recorded as thin rows with the thin handlers they would all be `ignored`
 * and the checkpoint would move past them. Each classic event claims its change, so a thin
 * notification of the same change applies nothing twice.
 */
export function backfillEndpoint(e: Endpoint): CatchUpEndpoint {
  const backoff = e.hybrid?.backoff ?? { baseMs: 1_000, capMs: 600_000 };
  const checks = { ...(e.livemode === undefined ? {} : { livemode: e.livemode }), ...(e.connect ? { connect: true } : {}) };
  if (e.provider.name === "stripe-thin")
    return {
      target: { provider: "stripe", endpoint: e.name, handlers: migratingHandlersFor("stripe")! },
      mode: "async",
      backoff,
      ...checks,
    };
  return { target: { provider: e.provider.name, endpoint: e.name, handlers: e.handlers }, mode: e.mode ?? "sync", backoff, ...checks };
}

/** Settings of {@link runCatchUp}. Durations in ms. */
export interface CatchUpOptions {
  db: Db;
  list: ListEvents;
  endpoints: readonly CatchUpEndpoint[];
  /** At start, an endpoint is backfilled when its newest inbox row and its checkpoint are both older than this (or absent). */
  idleAfterMs: number;
  /** Then every endpoint is backfilled at this interval; undefined: only the start check. */
  everyMs?: number;
  /** Stops the schedule (a run in progress ends after its current page). */
  signal: AbortSignal;
  /** One JSON line per run that did something, failed or found another process running it. */
  log: LogFn;
  /** Waits `ms` or until the signal (tests replace it). */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  /** OpenTelemetry: each backfill run is a span (backfill-events.ts). Default: none. */
  telemetry?: Telemetry;
}

/**
 * Runs event backfill without an operator: once at start for each endpoint that received nothing for
 * `idleAfterMs` (the process was down, or Stripe stopped delivering), then for every endpoint every
 * `everyMs`. Each endpoint is read for the platform and, when declared Connect, for each connected
 * account it knows ({@link knownAccounts}), each with its own checkpoint. Several processes may run
 * it: the (endpoint, account) lease (checkpoint.ts) lets one backfill at a time, and the others log
 * `busy` and skip that round. A failure is logged and retried at the next round; it never stops the
 * process (nor the other accounts' runs). Returns when `signal` aborts.
 */
export async function runCatchUp(options: CatchUpOptions): Promise<void> {
  const owner = `catch-up ${crypto.randomUUID()}`;
  const forAccount = async (endpoint: CatchUpEndpoint, account: string): Promise<void> => {
    try {
      const summary = await backfillEvents({
        db: options.db,
        list: options.list,
        ...endpoint,
        account,
        owner,
        signal: options.signal,
        telemetry: options.telemetry,
      });
      if (summary.events > 0 || summary.status !== "done" || summary.unrecoverable) options.log(catchUpLine(summary));
    } catch (err) {
      options.log({
        catch_up: "failed",
        endpoint: endpoint.target.endpoint,
        ...(account === "" ? {} : { account }),
        error: (err instanceof Error ? err.message : String(err)).slice(0, 300),
      });
    }
  };
  const once = async (endpoint: CatchUpEndpoint): Promise<void> => {
    let accounts = [""];
    try {
      if (endpoint.connect) accounts = ["", ...(await knownAccounts(options.db, endpoint.target))];
    } catch (err) {
      options.log({
        catch_up: "failed",
        endpoint: endpoint.target.endpoint,
        error: `Cannot read the endpoint's connected accounts: ${(err instanceof Error ? err.message : String(err)).slice(0, 250)}`,
      });
    }
    for (const account of accounts) if (!options.signal.aborted) await forAccount(endpoint, account);
  };
  for (const endpoint of options.endpoints) {
    if (options.signal.aborted) return;
    if (await idle(options.db, endpoint.target, options.idleAfterMs)) await once(endpoint);
  }
  if (options.everyMs === undefined) return;
  const pause = options.sleep ?? sleep;
  while (!options.signal.aborted) {
    await pause(options.everyMs, options.signal);
    for (const endpoint of options.endpoints) if (!options.signal.aborted) await once(endpoint);
  }
}

function catchUpLine(s: BackfillSummary): Record<string, unknown> {
  return {
    catch_up: s.status,
    endpoint: s.endpoint,
    ...(s.account === "" ? {} : { account: s.account }),
    events: s.events,
    new: s.fresh,
    already_recorded: s.alreadyRecorded,
    covered_until: s.coveredUntil,
    ...(s.unrecoverable
      ? { unrecoverable_from: s.unrecoverable.from, unrecoverable_to: s.unrecoverable.to, see: "bun run reconcile invoices" }
      : {}),
  };
}

/**
 * Whether the endpoint's newest inbox row and its newest backfill checkpoint (of any account) are both
 * older than `ms` (or absent): the endpoint, not an account, is what goes quiet when the process was
 * down or Stripe stopped delivering; a quiet connected account alone is no sign of either.
 */
async function idle(db: Db, target: ReceiveTarget, ms: number): Promise<boolean> {
  const [row] = await db<{ idle: boolean }[]>`
    select coalesce(greatest(
             (select max(received_at) from webhook_inbox where provider = ${target.provider} and endpoint = ${target.endpoint}),
             (select max(covered_until) from event_backfill_checkpoints where provider = ${target.provider} and endpoint = ${target.endpoint})
           ) < now() - ${ms} * interval '1 millisecond', true) as idle
  `;
  return row?.idle ?? true;
}

/**
 * The connected accounts (`acct_…`, sorted) the catch-up reads for a Connect endpoint, and a primary
 * change asks to backfill (primary-change.ts): those with a backfill checkpoint at it (any earlier
 * catch-up or `reconcile events --account/--all-accounts` run for it), and those of its inbox rows
 * received within Stripe's 30 days of events (older ones have no event left to list). Read from the
 * database rather than `GET /v1/accounts` on purpose: no extra permission beyond Events read, no call
 * per dormant account per round, and every account that ever delivered an event (or was backfilled
 * once) stays covered through its checkpoint row. An account none of whose events ever arrived is
 * picked up by `reconcile events --all-accounts` (docs/reconciliation.md).
 */
export async function knownAccounts(db: Db | Tx, target: Pick<ReceiveTarget, "provider" | "endpoint">): Promise<string[]> {
  const rows = await db<{ account: string }[]>`
    select account
      from event_backfill_checkpoints
     where provider = ${target.provider}
       and endpoint = ${target.endpoint}
       and account <> ''
    union
    select distinct account
      from webhook_inbox
     where provider = ${target.provider}
       and endpoint = ${target.endpoint}
       and account <> ''
       and received_at > now() - ${STRIPE_EVENTS_KEPT_MS} * interval '1 millisecond'
    order by account
  `;
  return rows.map((r) => r.account);
}

/** Settings of {@link runBackfillRequests}. Durations in ms. */
export interface BackfillRequestOptions {
  db: Db;
  list: ListEvents;
  /** Where a request's events are recorded, by the endpoint the health notification came to. */
  endpoints: ReadonlyMap<string, CatchUpEndpoint>;
  signal: AbortSignal;
  log: LogFn;
  /** How often to look for requests (default 30000). */
  pollMs?: number;
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
}

/**
 * Serves the backfill requests that Stripe's `v2.core.health.event_generation_failure.resolved`
 * notifications record (handlers/backfill-requests.ts): takes one (one runner per request, `SKIP
 * LOCKED`), backfills events created from its window's start through the endpoint's target, and marks
 * it finished. The run is a filtered one (it leaves the endpoint's checkpoint and lease alone) and
 * reads past the window's end up to now, which costs API reads only: recording is idempotent. Only
 * requests for `endpoints` are taken; one whose backfill fails is left for a retake (an hour later) and logged. Returns when `signal` aborts.
 */
export async function runBackfillRequests(options: BackfillRequestOptions): Promise<void> {
  const pause = options.sleep ?? sleep;
  const owner = `backfill-request ${crypto.randomUUID()}`;
  while (!options.signal.aborted) {
    let request: BackfillRequest | undefined;
    try {
      request = await takeBackfillRequest(options.db, undefined, [...options.endpoints.keys()]);
    } catch (err) {
      options.log({ backfill_request: "failed", error: (err instanceof Error ? err.message : String(err)).slice(0, 300) });
    }
    if (request) {
      const endpoint = options.endpoints.get(request.endpoint);
      if (!endpoint) {
        options.log({ backfill_request: "unserved", id: request.id, endpoint: request.endpoint });
        continue;
      }
      try {
        const summary = await backfillEvents({
          db: options.db,
          list: options.list,
          ...endpoint,
          account: request.account,
          since: request.start,
          filtered: true,
          owner,
          signal: options.signal,
        });
        if (summary.status === "done") await finishBackfillRequest(options.db, request.id);
        options.log({ backfill_request: summary.status, id: request.id, ...catchUpLine(summary) });
      } catch (err) {
        options.log({
          backfill_request: "failed",
          id: request.id,
          error: (err instanceof Error ? err.message : String(err)).slice(0, 300),
        });
      }
      continue;
    }
    await pause(options.pollMs ?? 30_000, options.signal);
  }
}
