// Edge file: wrk (Debian's HTTP benchmarking tool, written in C) as the load generator of `bun run bench`
// when it is installed: per request it costs a fraction of the CPU the Bun generator (bin/bench-load.ts)
// takes, and on a 2-core machine every microsecond the sender spends is taken from the receiver and
// PostgreSQL. Requests are pre-signed before the clock starts, each a distinct event (or one event
// every time for `duplicate`), as Stripe would send them.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { signStripePayload } from "../../providers/stripe.ts";
import { benchEventBody } from "./payload.ts";

/** What one load run measured, as bin/bench-load.ts reports it. Latencies in ms. */
export interface WrkLoad {
  requests: number;
  seconds: number;
  rps: number;
  p50: number;
  p99: number;
  statuses: Record<string, number>;
}

/** Requests pre-signed per second of a run: above what this machine answers, so no event repeats. */
const REQUESTS_PER_SECOND = 12_000;

/**
 * wrk's script: thread `tid` of `threads` takes every `threads`-th line of the requests file (`<signature>
 * TAB <body with \n escaped>`) and sends them in turn (PostgreSQL's key makes a repeat a duplicate).
 */
const SCRIPT = `
local id = 0
function setup(thread) thread:set("tid", id); id = id + 1 end
function init(args)
  requests = {}; counter = 0
  local i = 0
  for line in io.lines(args[1]) do
    if i % tonumber(args[2]) == tid then
      local sig, body = line:match("^([^\\t]*)\\t(.*)$")
      requests[#requests + 1] = wrk.format("POST", nil, { ["content-type"] = "application/json; charset=utf-8", ["stripe-signature"] = sig }, body:gsub("\\\\n", "\\n"))
    end
    i = i + 1
  end
end
function request() counter = counter + 1; return requests[((counter - 1) % #requests) + 1] end
`;

/** True when wrk runs on this machine (Debian package `wrk`). */
export function hasWrk(): boolean {
  return spawnSync("wrk", ["--version"], { stdio: "ignore" }).error === undefined;
}

/**
 * One run of `concurrency` connections for `durationMs` against `url` with wrk (2 threads), events
 * signed with `secret` for the run named `run`. Returns the rate, p50/p99 latency (ms) and the count of
 * non-2xx answers (`statuses.other`).
 * @throws Error when wrk fails or prints no rate.
 */
export async function wrkLoad(options: {
  url: string;
  secret: string;
  concurrency: number;
  durationMs: number;
  kind: "unique" | "duplicate";
  run: string;
}): Promise<WrkLoad> {
  const dir = mkdtempSync(join(tmpdir(), "webhook-inbox-wrk-"));
  try {
    const count = options.kind === "duplicate" ? 1 : Math.ceil((options.durationMs / 1000) * REQUESTS_PER_SECOND);
    const timestamp = Math.floor(Date.now() / 1000);
    const lines: string[] = [];
    for (let i = 0; i < count; i++) {
      const body = benchEventBody(options.run, i);
      lines.push(`${await signStripePayload(body, options.secret, timestamp)}\t${body.replaceAll("\n", "\\n")}`);
    }
    // Each of the 2 threads needs lines of its own.
    if (lines.length === 1) lines.push(lines[0] as string);
    writeFileSync(join(dir, "requests.tsv"), `${lines.join("\n")}\n`);
    writeFileSync(join(dir, "post.lua"), SCRIPT);
    const threads = Math.min(2, options.concurrency);
    // Asynchronous, so the bench's own event loop (a sampler, a child's output) runs while wrk does.
    const child = Bun.spawn(
      [
        "wrk",
        `-t${threads}`,
        `-c${options.concurrency}`,
        `-d${Math.round(options.durationMs / 1000)}s`,
        "--latency",
        "-s",
        join(dir, "post.lua"),
        options.url,
        "--",
        join(dir, "requests.tsv"),
        String(threads),
      ],
      { stdout: "pipe", stderr: "pipe", stdin: "ignore" },
    );
    const [stdout, stderr, status] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]);
    const out = { stdout, stderr, status };
    const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out.stdout)?.[1]);
    if (out.status !== 0 || !Number.isFinite(rps)) throw new Error(`wrk failed: ${(out.stderr || out.stdout).slice(-500)}`);
    const requests = Number(/(\d+) requests in/.exec(out.stdout)?.[1] ?? 0);
    const other = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out.stdout)?.[1] ?? 0);
    return {
      requests,
      seconds: options.durationMs / 1000,
      rps,
      p50: latencyMs(out.stdout, "50%"),
      p99: latencyMs(out.stdout, "99%"),
      statuses: { "2xx": requests - other, ...(other > 0 ? { other } : {}) },
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A percentile of wrk's `--latency` distribution (`50%   1.23ms`), in ms. */
function latencyMs(text: string, percentile: string): number {
  const m = new RegExp(`^\\s*${percentile}\\s+([\\d.]+)(us|ms|s)\\s*$`, "m").exec(text);
  if (!m) return Number.NaN;
  const value = Number(m[1]);
  return m[2] === "us" ? value / 1000 : m[2] === "s" ? value * 1000 : value;
}
