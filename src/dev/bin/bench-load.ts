// Entry file: the benchmark's load generator, run by `bun run bench` as a separate process so its CPU
// is not the receiver's. Usage: bun src/dev/bin/bench-load.ts <json options>; prints one JSON result line.
import { connect } from "node:net";
import { benchEventBody } from "../bench/payload.ts";
import { signStripePayload } from "../../providers/stripe.ts";

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

// Raw HTTP/1.1 over keep-alive sockets, one request in flight per connection, requests serialized
// before the clock starts: a fetch() client costs about as much CPU per request as the receiver
// itself, and on 2 cores that would be taken from the system under test.
const url = new URL(o.url);
const wire = prepared.map((p) => {
  const body = Buffer.from(p.body);
  return Buffer.concat([
    Buffer.from(
      `POST ${url.pathname} HTTP/1.1\r\nhost: ${url.host}\r\ncontent-type: application/json; charset=utf-8\r\nstripe-signature: ${p.signature}\r\ncontent-length: ${body.length}\r\n\r\n`,
    ),
    body,
  ]);
});
const latencies: number[] = [];
const statuses: Record<string, number> = {};
let next = 0;
const cpuBefore = process.cpuUsage();
const started = performance.now();
const deadline = started + o.durationMs;
const more = () => next < wire.length && (o.requests !== undefined || performance.now() < deadline);
await Promise.all(
  Array.from(
    { length: o.concurrency },
    () =>
      new Promise<void>((resolve) => {
        const socket = connect(Number(url.port), url.hostname);
        let buffer: Buffer = Buffer.alloc(0);
        let sentAt = 0;
        const send = () => {
          if (!more()) return (socket.end(), resolve());
          sentAt = performance.now();
          socket.write(wire[next++] as Buffer);
        };
        socket.on("connect", send);
        socket.on("error", () => {
          statuses.network = (statuses.network ?? 0) + 1;
          resolve();
        });
        socket.on("data", (chunk: Buffer) => {
          buffer = buffer.length ? Buffer.concat([buffer, chunk]) : chunk;
          for (;;) {
            const headerEnd = buffer.indexOf("\r\n\r\n");
            if (headerEnd < 0) return;
            const head = buffer.subarray(0, headerEnd).toString("latin1");
            const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
            if (buffer.length < headerEnd + 4 + length) return;
            const status = head.slice(9, 12);
            statuses[status] = (statuses[status] ?? 0) + 1;
            latencies.push(performance.now() - sentAt);
            buffer = buffer.subarray(headerEnd + 4 + length);
            send();
          }
        });
      }),
  ),
);
const elapsed = (performance.now() - started) / 1000;
latencies.sort((a, b) => a - b);
const pick = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
const cpu = process.cpuUsage(cpuBefore);
console.log(
  JSON.stringify({
    requests: latencies.length,
    seconds: elapsed,
    client_cpu_ms_per_request: (cpu.user + cpu.system) / 1000 / Math.max(1, latencies.length),
    rps: latencies.length / elapsed,
    p50: pick(0.5),
    p99: pick(0.99),
    statuses,
  }),
);
