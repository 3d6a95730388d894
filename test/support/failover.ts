// The parts the database-failure tests share (test/system/failover.test.ts, sync-standby-gone.test.ts,
// patroni-failover.test.ts): signed deliveries with their answers, the downstream sink of the outbox, what
// the answers say about a fault (time to recover, 503s, acknowledged deliveries lost), and the real
// commands as children stopped by SIGTERM.
import type { Subprocess } from "bun";
import { join } from "node:path";
import type { Db } from "../../src/db/db.ts";
import type { DeliveryAnswer } from "../../src/dev/chaos/storm.ts";
import { signStripePayload } from "../../src/providers/stripe.ts";
import { spawnBun, waitForLine, type Running } from "./bun-child.ts";

const CHILDREN = join(import.meta.dir, "..", "system");
/** The real `serve`, `worker` and `dispatch` entry files, each behind a self-exit (TEST_CHILD_SELF_EXIT_MS). */
export const BIN = {
  serve: join(CHILDREN, "children", "bin-serve.ts"),
  worker: join(CHILDREN, "worker-children", "bin-worker.ts"),
  dispatch: join(CHILDREN, "children", "bin-dispatch.ts"),
};

/** One HTTP answer to a delivery (the chaos senders' own record of an attempt). */
export type Answer = DeliveryAnswer;

/** True for a 2xx: the delivery was acknowledged. */
export const acknowledged = (a: Answer): boolean => typeof a.status === "number" && a.status >= 200 && a.status < 300;

/**
 * Posts `body` (a Stripe event) signed with `secret` to `url` once, with a fresh signature, and returns the
 * answer; a fetch that gets no answer within `timeoutMs` is `network`.
 */
export async function deliver(url: string, body: string, secret: string, timeoutMs = 30_000): Promise<Answer> {
  const eventId = (JSON.parse(body) as { id: string }).id;
  const sentAt = Date.now();
  const signature = await signStripePayload(body, secret, Math.floor(sentAt / 1000));
  try {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", "stripe-signature": signature },
      body,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const reply = (await res.json().catch(() => ({}))) as { outcome?: string; error?: string };
    return { eventId, sentAt, at: Date.now(), status: res.status, outcome: reply.outcome ?? reply.error };
  } catch (err) {
    return { eventId, sentAt, at: Date.now(), status: "network", reason: `${String(err)} after ${Date.now() - sentAt} ms` };
  }
}

/**
 * A downstream sink on 127.0.0.1 that answers 204 to every POST and records its `webhook-id` header, one
 * entry per delivery (a message delivered twice appears twice).
 */
export function startSink() {
  const ids: string[] = [];
  /** The first body seen for each id (for a failure message about an id the outbox does not hold). */
  const bodies = new Map<string, string>();
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const body = await request.text();
      const id = request.headers.get("webhook-id") ?? "(none)";
      ids.push(id);
      if (!bodies.has(id)) bodies.set(id, body.slice(0, 400));
      return new Response(null, { status: 204 });
    },
  });
  return { ids, bodies, url: `http://127.0.0.1:${server.port}/hooks`, stop: () => server.stop(true) };
}

/**
 * The outbox of `db` against what the sink received: message ids the sink never got, ids it got that the
 * outbox does not hold, and how many ids it got more than once (the dispatcher's at-least-once).
 */
export async function sinkReport(db: Db, sinkIds: readonly string[]) {
  const messageIds = new Set((await db<{ message_id: string }[]>`select message_id from outbox`).map((r) => r.message_id));
  const seen = new Map<string, number>();
  for (const id of sinkIds) seen.set(id, (seen.get(id) ?? 0) + 1);
  return {
    messages: messageIds.size,
    deliveries: sinkIds.length,
    missing: [...messageIds].filter((id) => !seen.has(id)),
    unknown: [...seen.keys()].filter((id) => !messageIds.has(id)),
    seenTwice: [...seen.values()].filter((n) => n > 1).length,
  };
}

/**
 * What the answers of deliveries around a fault at `faultAt` (ms since the epoch) say: `recoverMs`, from the
 * fault to the first 2xx of a delivery sent after the first failed answer that followed it (0: no delivery
 * failed; undefined: none succeeded since; a commit in flight when the fault struck may still be answered
 * 2xx a moment after it, so the first 2xx after the fault alone would say nothing); the 503s answered
 * after the fault; and every other failure after it (another status, or no answer).
 */
export function recovery(answers: readonly Answer[], faultAt: number) {
  const after = answers.filter((a) => a.at > faultAt);
  const firstFailure = Math.min(...after.filter((a) => !acknowledged(a)).map((a) => a.at));
  const firstOk = Math.min(...answers.filter((a) => a.sentAt > firstFailure && acknowledged(a)).map((a) => a.at));
  return {
    recoverMs: !Number.isFinite(firstFailure) ? 0 : Number.isFinite(firstOk) ? firstOk - faultAt : undefined,
    status503: after.filter((a) => a.status === 503).length,
    other: after
      .filter((a) => !acknowledged(a) && a.status !== 503)
      .map((a) => (a.status === "network" ? `no answer: ${a.reason}` : a.status)),
  };
}

/**
 * Acknowledged deliveries whose commit did not survive, from the answers and the surviving inbox rows
 * (`source` per event id): an event acknowledged as new (any 2xx but `duplicate`) more than once was
 * recorded twice, so the first record was lost; one acknowledged as new once whose surviving row is the
 * backfill's (`api`) was lost and recovered by it. A delivery answered `duplicate` found the row: no loss.
 */
export function lostAcknowledged(answers: readonly Answer[], source: ReadonlyMap<string, string>): string[] {
  const asNew = new Map<string, number>();
  for (const a of answers) if (acknowledged(a) && a.outcome !== "duplicate") asNew.set(a.eventId, (asNew.get(a.eventId) ?? 0) + 1);
  return [...asNew].filter(([id, n]) => n > 1 || source.get(id) === "api").map(([id]) => id);
}

/** The environment every child gets besides `process.env`: quiet logs and a self-exit past the test's own bound. */
export function childEnv(extra: Record<string, string>, selfExitMs: number): Record<string, string | undefined> {
  return { ...process.env, LOG_LEVEL: "warn", TEST_CHILD_SELF_EXIT_MS: String(selfExitMs), ...extra };
}

/** Starts `serve` with `env` and waits for its listening line. */
export async function startServe(env: Record<string, string | undefined>, tracked: Set<Subprocess>, timeoutMs = 30_000): Promise<Running> {
  const serve = spawnBun([BIN.serve], env, tracked);
  await waitForLine(serve, "webhook-inbox listening on", timeoutMs);
  return serve;
}

/**
 * Sends SIGTERM to each child (by pid) and waits up to `boundMs` for it to exit; resolves with each one's exit
 * code, or "still running" (then SIGKILLed, by pid).
 */
export async function stopChildren(children: Record<string, Running>, boundMs: number): Promise<Record<string, number | string>> {
  const entries = await Promise.all(
    Object.entries(children).map(async ([name, c]) => {
      if (c.child.exitCode !== null || c.child.signalCode !== null) return [name, c.child.exitCode ?? String(c.child.signalCode)] as const;
      process.kill(c.child.pid, "SIGTERM");
      const code = await Promise.race([c.child.exited, Bun.sleep(boundMs).then(() => "still running" as const)]);
      if (code === "still running") process.kill(c.child.pid, "SIGKILL");
      return [name, code] as const;
    }),
  );
  return Object.fromEntries(entries);
}
