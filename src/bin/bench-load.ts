// Entry file: the benchmark's load generator, run by `bun run bench` as a separate process so its CPU
// is not the receiver's. Usage: bun src/bin/bench-load.ts <json options>; prints one JSON result line.
import { benchEventBody } from "../bench/payload.ts";
import { signStripePayload } from "../stripe-event.ts";

interface LoadOptions {
  url: string;
  secret: string;
  concurrency: number;
  /** Run for this long (ms), or until `requests` were sent when set. */
  durationMs: number;
  requests?: number;
  /** `unique`: every request a new event; `duplicate`: one event every time. */
  kind: "unique" | "duplicate";
  run: string;
}

const o = JSON.parse(process.argv[2] ?? "{}") as LoadOptions;
const total = o.requests ?? Math.ceil((o.durationMs / 1000) * 12_000); // an upper bound of what a run can send
const timestamp = Math.floor(Date.now() / 1000);
// Pre-signed, with a fresh timestamp: signing is the sender's cost, not the receiver's.
const prepared: { body: string; signature: string }[] = [];
if (o.kind === "duplicate") {
  const body = benchEventBody(o.run, 0);
  const signature = await signStripePayload(body, o.secret, timestamp);
  for (let i = 0; i < total; i++) prepared.push({ body, signature });
} else {
  for (let i = 0; i < total; i++) {
    const body = benchEventBody(o.run, i);
    prepared.push({ body, signature: await signStripePayload(body, o.secret, timestamp) });
  }
}

const latencies: number[] = [];
const statuses: Record<string, number> = {};
let next = 0;
const started = performance.now();
const deadline = started + o.durationMs;
await Promise.all(Array.from({ length: o.concurrency }, async () => {
  while (next < prepared.length && (o.requests !== undefined || performance.now() < deadline)) {
    const item = prepared[next++];
    if (!item) break;
    const t0 = performance.now();
    let status: string;
    try {
      const response = await fetch(o.url, {
        method: "POST",
        headers: { "content-type": "application/json; charset=utf-8", "stripe-signature": item.signature },
        body: item.body,
      });
      await response.arrayBuffer();
      status = String(response.status);
    } catch {
      status = "network";
    }
    latencies.push(performance.now() - t0);
    statuses[status] = (statuses[status] ?? 0) + 1;
  }
}));
const elapsed = (performance.now() - started) / 1000;
latencies.sort((a, b) => a - b);
const pick = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
console.log(JSON.stringify({ requests: latencies.length, seconds: elapsed, rps: latencies.length / elapsed, p50: pick(0.5), p99: pick(0.99), statuses }));
