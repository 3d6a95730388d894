// The real `serve` entry file in async mode (group commit) SIGKILLed under concurrent load, while
// groups are in flight: every delivery it answered 2xx has its row; the deliveries it never answered
// are the provider's to retry. The child is signalled only by its pid and exits by itself after 30 s.
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { signStripePayload } from "../../src/providers/stripe.ts";
import { eventBody, freshDatabase, invoice, SECRET } from "../support/helpers.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const children = new Set<Subprocess>();
const BIN_SERVE = join(import.meta.dir, "children", "bin-serve.ts");

afterAll(async () => {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
    await child.exited;
  }
  await fresh.drop();
});

/** Concurrent senders: each keeps one delivery outstanding, so the receiver groups them. */
const SENDERS = 24;
/** Answered deliveries before the kill: the load is well under way, groups follow one another. */
const ANSWERED_BEFORE_KILL = 300;

test("`serve` in async mode SIGKILLed while groups are in flight: every 2xx has its row", async () => {
  const port = await freePort();
  const serve = spawnBun(
    [BIN_SERVE],
    {
      ...process.env,
      DATABASE_URL: fresh.url,
      STRIPE_WEBHOOK_SECRET: SECRET,
      PORT: String(port),
      HOST: "127.0.0.1",
      INBOX_MODE: "async",
      DB_POOL_MAX: String(SENDERS),
    },
    children,
  );
  try {
    await waitForLine(serve, "webhook-inbox listening on");
    const acknowledged: string[] = [];
    const rejected: string[] = [];
    let unanswered = 0;
    let killed = false;
    const { promise: enoughAnswered, resolve: killNow } = Promise.withResolvers<void>();
    const sender = async (s: number): Promise<void> => {
      for (let i = 0; !killed; i++) {
        const id = `evt_crash_${s}_${i}`;
        const body = eventBody(id, "invoice.paid", invoice({ id: `in_crash_${s}_${i}`, status: "paid", amount_paid: 2000 }));
        const signature = await signStripePayload(body, SECRET, Math.floor(Date.now() / 1000));
        try {
          const response = await fetch(`http://127.0.0.1:${port}/webhooks/stripe`, {
            method: "POST",
            headers: { "content-type": "application/json", "stripe-signature": signature },
            body,
          });
          const answer = (await response.json()) as { outcome?: string };
          if (response.status === 200 && answer.outcome === "queued") acknowledged.push(id);
          else rejected.push(`${id}: ${response.status} ${JSON.stringify(answer)}`);
          if (acknowledged.length >= ANSWERED_BEFORE_KILL) killNow();
        } catch {
          unanswered += 1; // the receiver died with this delivery in flight
          return;
        }
      }
    };
    const senders = Array.from({ length: SENDERS }, (_, s) => sender(s));
    await Promise.race([enoughAnswered, serve.child.exited]);
    process.kill(serve.child.pid, "SIGKILL");
    killed = true;
    expect(await serve.child.exited).not.toBe(0);
    expect(serve.child.signalCode).toBe("SIGKILL");
    await Promise.all(senders);

    expect(rejected).toEqual([]);
    expect(acknowledged.length).toBeGreaterThanOrEqual(ANSWERED_BEFORE_KILL);
    expect(unanswered).toBeGreaterThan(0);
    const rows = await db<{ event_id: string }[]>`select event_id from webhook_inbox where event_id like 'evt_crash_%'`;
    const recorded = new Set(rows.map((row) => row.event_id));
    expect(acknowledged.filter((id) => !recorded.has(id))).toEqual([]);
  } finally {
    if (serve.child.exitCode === null && serve.child.signalCode === null) process.kill(serve.child.pid, "SIGKILL");
    await serve.child.exited;
  }
}, 60_000);
