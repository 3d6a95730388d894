import { mulberry32 } from "../random.ts";
import { signStripePayload } from "../../providers/stripe.ts";
import type { StormEvent } from "./model.ts";

/** Options of {@link sendStorm}; times in ms. */
export interface StormOptions {
  /** Receiver base URLs; each attempt picks one at random (a load balancer in front of them). */
  receivers: readonly string[];
  /** Path of the webhook route, e.g. `/webhooks/stripe`. */
  path: string;
  secret: string;
  /** Concurrent senders. */
  senders: number;
  seed: number;
  /** Deliveries per second over all senders (Stripe paces its sends too). */
  ratePerSec: number;
  /** Give up on an event not acknowledged by then (counted as unacknowledged). */
  deadlineMs: number;
  /**
   * A delivery still failing this long after its first attempt is given up, as Stripe gives up after
   * three days of retries (counted in `gaveUp`, not retried again); undefined: retry until the deadline.
   */
  giveUpMs?: number;
  /** Called with the number of events acknowledged so far each time one more event gets its first 2xx. */
  onAcknowledged?: (acknowledged: number) => void;
  /** Called with every attempt's answer, in the order they come (a failover test measures the outage from them). */
  onAnswer?: (answer: DeliveryAnswer) => void;
  /** An attempt with no answer after this long is a failed connection (`network`), ms. Default 10000. */
  requestTimeoutMs?: number;
}

/** One HTTP attempt of a delivery and what came back. */
export interface DeliveryAnswer {
  eventId: string;
  /** When it was sent and answered, ms since the epoch. */
  sentAt: number;
  at: number;
  /** The HTTP status, or `network` when no answer came (refused, reset, or past `requestTimeoutMs`). */
  status: number | "network";
  /** The receiver's `outcome` for a 2xx (`processed`, `queued`, `duplicate`, …), its `error` code otherwise. */
  outcome?: string;
  /** Why there was no answer (the fetch error), for failure messages. */
  reason?: string;
}

/** What the senders saw. */
export interface StormStats {
  events: number;
  /** Deliveries (an event sent k times counts k), each retried until 2xx. */
  deliveries: number;
  duplicates: number;
  /** Extra copies sent at the same moment as another copy of the same event. */
  concurrentDuplicates: number;
  /** HTTP attempts, retries included. */
  requests: number;
  /** Attempts that failed: non-2xx status, or `network` for refused/reset connections. */
  failedAttempts: Record<string, number>;
  /** Final 2xx outcomes by name. */
  outcomes: Record<string, number>;
  /** Events with at least one 2xx. */
  acknowledged: Set<string>;
  /** Deliveries that never got a 2xx before the deadline. */
  unacknowledged: string[];
  /** Deliveries the sender gave up on after `giveUpMs` (what only a backfill from the Events API can recover). */
  gaveUp: string[];
}

/**
 * Delivers every event 1–3 times, in shuffled order, from `senders` concurrent senders that behave
 * like Stripe: each delivery is retried after any non-2xx or connection failure with jittered
 * exponential backoff (capped at 1 s here to keep runs short) and a fresh signature per attempt,
 * until a 2xx, the deadline, or (with `giveUpMs`) the sender giving up on it. About a third of the duplicated events send their copies at the same
 * moment. Never throws for HTTP failures.
 */
export async function sendStorm(events: readonly StormEvent[], o: StormOptions): Promise<StormStats> {
  const random = mulberry32(o.seed ^ 0x5bd1e995);
  const stats: StormStats = {
    events: events.length,
    deliveries: 0,
    duplicates: 0,
    concurrentDuplicates: 0,
    requests: 0,
    failedAttempts: {},
    outcomes: {},
    acknowledged: new Set(),
    unacknowledged: [],
    gaveUp: [],
  };
  const jobs = events.map((event) => {
    const copies = 1 + Math.floor(random() * 3);
    const together = copies > 1 && random() < 0.35;
    stats.deliveries += copies;
    stats.duplicates += copies - 1;
    if (together) stats.concurrentDuplicates += copies - 1;
    return { event, copies, together };
  });
  const deadline = Date.now() + o.deadlineMs;
  const gapMs = 1000 / o.ratePerSec;
  let nextSlot = Date.now();
  const paced = async () => {
    const wait = nextSlot - Date.now();
    nextSlot = Math.max(nextSlot, Date.now()) + gapMs;
    if (wait > 0) await sleep(wait);
  };

  async function deliverOnce(event: StormEvent): Promise<void> {
    const first = Date.now();
    for (let attempt = 1; Date.now() < deadline; attempt++) {
      if (o.giveUpMs !== undefined && Date.now() - first > o.giveUpMs) {
        stats.gaveUp.push(event.id);
        return;
      }
      const url = `${o.receivers[Math.floor(random() * o.receivers.length)]}${o.path}`;
      stats.requests++;
      let failure: string;
      const sentAt = Date.now();
      try {
        const signature = await signStripePayload(event.body, o.secret, Math.floor(Date.now() / 1000));
        const response = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json; charset=utf-8", "stripe-signature": signature },
          body: event.body,
          signal: AbortSignal.timeout(o.requestTimeoutMs ?? 10_000),
        });
        const text = await response.text();
        const reply = (() => {
          try {
            return JSON.parse(text) as { outcome?: string; error?: string };
          } catch {
            return {};
          }
        })();
        o.onAnswer?.({ eventId: event.id, sentAt, at: Date.now(), status: response.status, outcome: reply.outcome ?? reply.error });
        if (response.ok) {
          const outcome = reply.outcome ?? "2xx";
          stats.outcomes[outcome] = (stats.outcomes[outcome] ?? 0) + 1;
          if (!stats.acknowledged.has(event.id)) {
            stats.acknowledged.add(event.id);
            o.onAcknowledged?.(stats.acknowledged.size);
          }
          return;
        }
        failure = String(response.status);
      } catch (err) {
        o.onAnswer?.({
          eventId: event.id,
          sentAt,
          at: Date.now(),
          status: "network",
          reason: `${String(err)} after ${Date.now() - sentAt} ms`,
        });
        failure = "network";
      }
      stats.failedAttempts[failure] = (stats.failedAttempts[failure] ?? 0) + 1;
      await sleep(Math.min(25 * 2 ** Math.min(attempt, 10), 1000) * (0.5 + random() / 2));
    }
    stats.unacknowledged.push(event.id);
  }

  let next = 0;
  await Promise.all(
    Array.from({ length: o.senders }, async () => {
      while (next < jobs.length) {
        const job = jobs[next++];
        if (!job) break;
        await paced();
        if (job.together) {
          await Promise.all(Array.from({ length: job.copies }, () => deliverOnce(job.event)));
        } else {
          for (let i = 0; i < job.copies; i++) await deliverOnce(job.event);
        }
      }
    }),
  );
  return stats;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
