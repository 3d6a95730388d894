import type { Db } from "../db/db.ts";
import type { InboxKey } from "../inbox/inbox.ts";

/** A row a worker claimed: its key, type, and the attempt number this claim counted. */
export interface Claim extends InboxKey {
  eventType: string;
  /**
   * `attempts` after this claim's increment. It doubles as a fencing token: a worker records a
   * failure only while the row still carries its number, so a worker whose lease expired and whose
   * row was claimed again cannot push back the new owner's lease.
   */
  attempt: number;
  /** The row's `account` (sql/0021): the connected account the event belongs to, `""` for the platform's own. */
  account: string;
  /** When this claim's lease ends, ms since the epoch (this process's clock, taken before the claim was sent). */
  leaseEndsAt: number;
  /** The stored event (never changes while unprocessed), so processing needs no second read. */
  payload?: Record<string, unknown> | null;
  /** For a row kept without a payload (0006: jsonb refused it), its exact verified body. */
  rawBody?: string | null;
  /**
   * Why the row must be parked again instead of applied: its stored event type is not the one sent
   * (sanitizing replaced a \u0000 or lone surrogate in it by U+FFFD, jsonb-text.ts), so no handler,
   * and no "ignored" either, fits it. Undefined for every other row.
   */
  refusal?: string;
  /** W3C traceparent of the span that recorded the row (sql/0023), for the worker's span link; null when none. */
  traceparent?: string | null;
}

/** The last_error of a row whose type sanitizing changed (the receiver parks it with the same opening words). */
const TYPE_CHANGED =
  "Event type holds characters PostgreSQL cannot store: recorded with them replaced, not applied (requeueing cannot fix it: handle it by hand, then bun run inbox resolve)";

/** A group of due rows as the claim walks them: one endpoint and one account (`""`: the platform's own events). */
export interface ClaimGroup {
  provider: string;
  endpoint: string;
  account: string;
}

/** What a claim saw beyond the rows it took, for the worker's loop ({@link ClaimOptions.onWalk}). */
export interface ClaimWalk {
  /**
   * Due rows may be left that this worker may take now (a group had more than its share, the walk stopped
   * at its bound, or it began after a group and so did not see the ones before): claim again at once.
   */
  more: boolean;
  /** Due rows were left only because their connected account holds `accounts.max` rows of this worker: claim again when some finish. */
  capped: boolean;
  /** The walk stopped at its bound of groups: the group to start after next time (`after`), so every group gets its turn. */
  stoppedAt?: ClaimGroup;
}

/** Options of {@link claimBatch}. */
export interface ClaimOptions {
  /** Rows to claim at most. */
  limit: number;
  /**
   * Rows already tried (`attempts > 0`: a failure, or a worker that died holding them) to claim at most,
   * oldest first; default `limit`. The worker takes one at a time, and none while one is in flight, so
   * a retried row is never in a batch and never runs beside another (worker/process-batch.ts): an
   * event that kills its worker takes only itself to the attempt limit.
   */
  retried?: number;
  /**
   * Rows never tried that need a Stripe API read first (Fetcher `scope`: every row of `providers`, and
   * rows at `endpoints` as `provider/endpoint`), at most `limit` of them, oldest first; default none
   * singled out. The worker takes one per free slot, so the API reads a claim starts stay what its
   * slots and the rate limit can finish within their leases.
   */
  reads?: { providers: readonly string[]; endpoints: readonly string[]; limit: number };
  /** Lease, ms: the row is invisible to other workers until then (its `available_at`). */
  leaseMs: number;
  /** Attempt limit; a due row that already used them is parked as needs-review instead. */
  maxAttempts: number;
  /**
   * Providers whose rows this worker can process (it has their handler table, and an API reader where
   * they need one); other rows are left for workers that can. Undefined: every provider.
   */
  providers?: readonly string[];
  /**
   * The bound on one connected account (worker.ts `accountMax`): `held` says how many rows of each
   * account this worker holds now (claimed, not finished), and no account other than the platform's
   * (`""`) is given rows past `max` held. Undefined: no bound.
   */
  accounts?: { max: number; held: ReadonlyMap<string, number> };
  /** Start the walk after this group (the last claim's {@link ClaimWalk.stoppedAt}); default the first. */
  after?: ClaimGroup;
  /** Told about rows this claim parked (so the worker can log them). */
  onParked?: (rows: (InboxKey & { eventType: string; attempts: number })[]) => void;
  /** Told what the claim saw beyond the rows it took ({@link ClaimWalk}). */
  onWalk?: (walk: ClaimWalk) => void;
}

/**
 * Claims up to `limit` due rows in ONE statement (seed §6 `claim_next`, several at once, fairly between
 * connected accounts): counts the attempt and pushes `available_at` out by the lease before any work is
 * done, so a process that dies mid-work has still used up an attempt. Rows are picked with
 * `FOR UPDATE SKIP LOCKED` (PostgreSQL manual, SELECT, "The Locking Clause"):
 * - Group by group: the claim walks the due index (sql/0030: provider, endpoint, account, due time) from
 *   one (provider, endpoint, account) group to the next, one index probe each (PostgreSQL wiki, "Loose
 *   indexscan"), up to `max(limit ÷ 4, 16)` groups (each step costs about what claiming a few rows
 *   does: bench:claim), starting after `after`. A group of a provider the worker cannot process, or of
 *   a paused endpoint (`endpoint_pauses`), is stepped over whole; a group of a paused account, or of an
 *   account at its bound (`accounts`), is passed. Each group offers its
 *   oldest due rows, at most its share of `limit` (and of what its account may still hold), and the
 *   claim takes them round robin: every account's oldest row first, then every account's second, each
 *   round oldest first. So a connected account with 10,000 rows queued does not stand in front of
 *   another's one row, and within an account rows go oldest first.
 * - Of rows already tried at most `retried` are claimed, and of rows that need an API read at most
 *   `reads.limit`; a picked row that has used all its attempts (its last worker died without reporting)
 *   is parked as needs-review in the same statement rather than claimed.
 * `onWalk` is told whether due rows were left, and why ({@link ClaimWalk}).
 */
export async function claimBatch(db: Db, options: ClaimOptions): Promise<Claim[]> {
  const leaseEndsAt = Date.now() + options.leaseMs;
  const reads = options.reads ?? { providers: [], endpoints: [], limit: 0 };
  const groups = Math.max(Math.ceil(options.limit / 4), 16);
  const after = options.after;
  const held = [...(options.accounts?.held ?? [])].filter(([account]) => account !== "");
  type Row = Omit<Claim, "attempt" | "leaseEndsAt" | "refusal"> & {
    kind: "claimed" | "parked" | "walk";
    attempts: number;
    typeChanged: boolean | null;
    more: boolean | null;
    capped: boolean | null;
    receivedAt: Date | null;
  };
  // A group is stepped over whole (`jump`) when the worker does not serve its provider or its endpoint is paused.
  const jump = (g: string) => db`
    not (${options.providers === undefined} or ${db(g)}.provider = any(${(options.providers ?? []) as string[]}::text[]))
    or exists (select 1 from endpoint_pauses p where p.endpoint = ${db(g)}.endpoint and p.account = '')
  `;
  const due = (alias: string) => db`
    ${db(alias)}.processed_at is null and ${db(alias)}.needs_review_at is null and ${db(alias)}.available_at <= now()
  `;
  const rows = await db<Row[]>`
    with recursive walk (provider, endpoint, account, jump, n) as (
        select f.provider, f.endpoint, f.account, j.jump, 1
          from (select provider, endpoint, account
                  from webhook_inbox i
                 where ${due("i")}
                   and (${after === undefined} or (provider, endpoint, account) > (${after?.provider ?? ""}::text, ${after?.endpoint ?? ""}::text, ${after?.account ?? ""}::text))
                 order by provider, endpoint, account
                 limit 1) f
         cross join lateral (select ${jump("f")} as jump) j
      union all
        -- The next group: past the whole endpoint when this one is jumped, else past this account.
        select f.provider, f.endpoint, f.account, j.jump, w.n + 1
          from walk w
         cross join lateral (
           (select provider, endpoint, account
              from webhook_inbox i
             where w.jump
               and (provider, endpoint) > (w.provider, w.endpoint)
               and ${due("i")}
             order by provider, endpoint, account
             limit 1)
           union all
           (select provider, endpoint, account
              from webhook_inbox i
             where not w.jump
               and (provider, endpoint, account) > (w.provider, w.endpoint, w.account)
               and ${due("i")}
             order by provider, endpoint, account
             limit 1)
         ) f
         cross join lateral (select ${jump("f")} as jump) j
         where w.n < ${groups}
    ), open as (
      -- Groups that may give rows, and how many each may still hold: a connected account its bound less
      -- what this worker holds of it; the platform's own events (account '') are not bounded.
      select w.provider, w.endpoint, w.account,
             case when w.account <> '' and ${options.accounts !== undefined} then ${options.accounts?.max ?? 0}::int - coalesce(h.held, 0) end as allowance
        from walk w
        left join unnest(${held.map(([a]) => a)}::text[], ${held.map(([, n]) => n)}::int[]) as h (account, held) on h.account = w.account
       where not w.jump
         and not exists (select 1 from endpoint_pauses p where p.endpoint = w.endpoint and p.account = w.account)
    ), offered as (
      select o.*, least(o.allowance, ceil(${options.limit}::numeric / count(*) over ()))::int as share
        from open o
       where coalesce(o.allowance, 1) > 0
    ), fetched as (
      -- Each group's oldest due rows, one more than its share (to know whether it has more).
      select r.*, o.allowance, o.share
        from offered o
       cross join lateral (
         select x.*, row_number() over (order by x.available_at) as in_group
           from (select i.provider, i.endpoint, i.event_id, i.attempts, i.available_at, i.account
                   from webhook_inbox i
                  where (i.provider, i.endpoint, i.account) = (o.provider, o.endpoint, o.account)
                    and ${due("i")}
                  order by i.available_at
                  limit o.share + 1
                    for update skip locked) x
       ) r
    ), ranked as (
      select f.*, row_number() over (partition by f.account order by f.available_at) as in_account
        from fetched f
       where f.in_group <= f.share
    ), picked as (
      -- Round robin: every account's oldest row, then every account's second, …; each round oldest first.
      select provider, endpoint, event_id, attempts, available_at, account
        from ranked
       where allowance is null or in_account <= allowance
       order by in_account, available_at
       limit ${options.limit}
    ), walked as (
      -- Rows fetched and not taken: left for the next claim, or left because their account is at its bound.
      -- A walk that began after a group and ended before its bound did not see the groups before that one.
      select coalesce(bool_or(f.allowance is null or t.taken < f.allowance), false) or (select max(n) from walk) >= ${groups}
               or ${after !== undefined} as more,
             coalesce(bool_or(f.allowance is not null and t.taken >= f.allowance), false)
               or exists (select 1 from open where allowance <= 0) as capped
        from fetched f
        cross join lateral (select count(*) as taken from picked p where p.account = f.account) t
       where not exists (select 1 from picked p where (p.provider, p.endpoint, p.event_id) = (f.provider, f.endpoint, f.event_id))
    ), kinds as (
      select p.*, p.provider = any(${reads.providers as string[]}::text[])
                  or p.provider || '/' || p.endpoint = any(${reads.endpoints as string[]}::text[]) as reads
        from picked p
    ), chosen as (
      -- Rows to park, rows never tried (of those that need an API read at most reads.limit), and at most
      -- options.retried rows already tried; the others stay due (their locks end with this statement).
      select provider, endpoint, event_id, attempts from kinds
       where attempts >= ${options.maxAttempts} or (attempts = 0 and not reads)
      union all
      (select provider, endpoint, event_id, attempts from kinds where attempts = 0 and reads order by available_at limit ${reads.limit})
      union all
      (select provider, endpoint, event_id, attempts from kinds
        where attempts > 0 and attempts < ${options.maxAttempts}
        order by available_at
        limit ${options.retried ?? options.limit})
    ), parked as (
      update webhook_inbox w
         set needs_review_at = now(),
             last_error = left(coalesce(w.last_error || '; ', '') || 'attempt limit ' || ${options.maxAttempts}::int
                          || ' reached with no outcome recorded for the last attempt (its worker was killed or its lease expired,'
                          || ' or the row was made due again without resetting attempts: use "inbox requeue")', 1000)
        from chosen p
       where p.attempts >= ${options.maxAttempts}
         and (w.provider, w.endpoint, w.event_id) = (p.provider, p.endpoint, p.event_id)
      returning w.provider, w.endpoint, w.event_id, w.event_type, w.attempts
    ), claimed as (
      update webhook_inbox w
         set attempts = w.attempts + 1,
             available_at = now() + ${options.leaseMs} * interval '1 millisecond'
        from chosen p
       where p.attempts < ${options.maxAttempts}
         and (w.provider, w.endpoint, w.event_id) = (p.provider, p.endpoint, p.event_id)
      returning w.provider, w.endpoint, w.event_id, w.event_type, w.attempts, w.received_at, w.account, w.traceparent
    )
    -- Each claimed row's payload: its key and received_at name one payload row in one partition.
    select 'claimed' as kind, c.provider, c.endpoint, c.event_id as "eventId", c.event_type as "eventType", c.attempts, p.payload,
           case when p.payload is null then p.raw_body end as "rawBody",
           -- Sanitizing writes U+FFFD (chr(65533)); a row kept from its raw body may have had it done.
           (p.payload_sanitized is not null or p.payload is null) and strpos(c.event_type, chr(65533)) > 0 as "typeChanged",
           c.account, c.traceparent, null::boolean as more, null::boolean as capped, c.received_at as "receivedAt"
      from claimed c
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
    union all
    select 'parked', provider, endpoint, event_id, event_type, attempts, null, null, null, null, null, null, null, null from parked
    union all
    -- The walk's last group, when it stopped at its bound, and what was left.
    select 'walk', l.provider, l.endpoint, null, null, null, null, null, null, l.account, null, k.more, k.capped, null
      from walked k
      left join (select provider, endpoint, account from walk where n >= ${groups}) l on true
  `;
  const parked = rows.filter((r) => r.kind === "parked");
  if (parked.length > 0)
    options.onParked?.(
      parked.map(({ provider, endpoint, eventId, eventType, attempts }) => ({ provider, endpoint, eventId, eventType, attempts })),
    );
  const walk = rows.find((r) => r.kind === "walk");
  options.onWalk?.({
    more: walk?.more === true,
    capped: walk?.capped === true,
    ...(walk?.provider != null ? { stoppedAt: { provider: walk.provider, endpoint: walk.endpoint, account: walk.account } } : {}),
  });
  // Oldest first, as received (UPDATE … RETURNING has no order): a unit applies its rows in this order.
  return rows
    .filter((r) => r.kind === "claimed")
    .sort((a, b) => a.receivedAt!.getTime() - b.receivedAt!.getTime() || (a.eventId < b.eventId ? -1 : a.eventId > b.eventId ? 1 : 0))
    .map(({ kind: _, more: _m, capped: _c, receivedAt: _r, attempts, typeChanged, ...r }) => ({
      ...r,
      attempt: attempts,
      leaseEndsAt,
      ...(typeChanged ? { refusal: TYPE_CHANGED } : {}),
    }));
}
