// Edge file: `bun run chaos --scale 1x1,2x2,4x4`: one chaos run per configuration, as child processes.
import type { Subprocess } from "bun";

/** One configuration of a scale run: receiver and worker processes. */
export interface ScaleConfig {
  receivers: number;
  workers: number;
}

/**
 * Parses a `--scale` list such as `1x1,2x2,4x4` (receivers × workers, each a whole number ≥ 1, at most 32).
 * @throws Error naming the first bad item.
 */
export function parseScale(list: string): ScaleConfig[] {
  const configs = list.split(",").map((item) => {
    const m = /^(\d+)x(\d+)$/.exec(item.trim());
    const receivers = Number(m?.[1]);
    const workers = Number(m?.[2]);
    if (!m || receivers < 1 || workers < 1 || receivers > 32 || workers > 32)
      throw new Error(`--scale items are RECEIVERSxWORKERS, each 1 to 32, e.g. 1x1,2x2,4x4; got "${item}"`);
    return { receivers, workers };
  });
  return configs;
}

/** What a scale run reports per configuration: the chaos run's JSON summary (fields as `bun run chaos --json` prints). */
export interface ScaleRow extends ScaleConfig {
  summary: Record<string, unknown> | undefined;
  exitCode: number;
  /** The child's last output lines when it printed no summary. */
  failure?: string;
}

/**
 * Runs `bun <chaosPath> --json --receivers R --workers W …args` once per configuration, one after the
 * other (each with its own throwaway PostgreSQL, or its own scratch database on DATABASE_URL), and
 * returns each run's summary. `onChild` receives the running child so a stop signal can reach it.
 */
export async function runScale(
  chaosPath: string,
  configs: readonly ScaleConfig[],
  args: readonly string[],
  onChild: (child: Subprocess | undefined) => void,
  say: (line: string) => void,
): Promise<ScaleRow[]> {
  const rows: ScaleRow[] = [];
  for (const c of configs) {
    say(`chaos --scale: ${c.receivers} receivers × ${c.workers} workers…`);
    const child = Bun.spawn(
      [process.execPath, chaosPath, "--json", "--receivers", String(c.receivers), "--workers", String(c.workers), ...args],
      { stdout: "pipe", stderr: "pipe", stdin: "ignore" },
    );
    onChild(child);
    const [stdout, stderr, exitCode] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]);
    onChild(undefined);
    const last = stdout.trim().split("\n").pop() ?? "";
    let summary: Record<string, unknown> | undefined;
    try {
      summary = JSON.parse(last) as Record<string, unknown>;
    } catch {
      summary = undefined;
    }
    rows.push({
      ...c,
      summary,
      exitCode,
      ...(summary ? {} : { failure: `${stdout}\n${stderr}`.trim().split("\n").slice(-10).join("\n") }),
    });
  }
  return rows;
}

/** One printable line per configuration: throughput, CPU per event (ms) and the end state. */
export function scaleTable(rows: readonly ScaleRow[]): Record<string, Record<string, unknown>> {
  return Object.fromEntries(
    rows.map((r) => {
      const s = r.summary ?? {};
      return [
        `${r.receivers}x${r.workers}`,
        {
          events: s.events,
          "acked/s": s.acknowledged_per_s,
          "applied/s": s.applied_per_s,
          "recv+worker CPU ms/event": s.app_cpu_ms_per_event,
          "(recv / worker)": `${String(s.receiver_cpu_ms_per_event)} / ${String(s.worker_cpu_ms_per_event)}`,
          "PostgreSQL CPU ms/event": s.postgres_cpu_ms_per_event,
          "xacts/event": s.transactions_per_event,
          "kills r/w": `${String(s.receiver_kills)}/${String(s.worker_kills)}`,
          lost: s.lost,
          "double-booked": s.double_booked,
          unprocessed: s.unprocessed,
          passed: s.passed ?? false,
        },
      ];
    }),
  );
}
