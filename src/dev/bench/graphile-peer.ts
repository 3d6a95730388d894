// Edge file: graphile-worker (a devDependency, on node-postgres) as the peer of `bun run bench`'s
// worker drain, doing equal work: the billing handler's exact statement per job.
import { Logger, run, runMigrations } from "graphile-worker";
import type { Db } from "../../db/db.ts";

/** The statement a job runs (with `$n` parameters) and its parameters for job number `n`. */
export interface PeerWork {
  text: string;
  params: (n: number) => unknown[];
}

const silent = new Logger(() => () => {});

/**
 * Prefills `jobs` graphile-worker jobs and times how long `concurrency` workers take to run them all,
 * each job executing `work` through graphile's pg client. `batched` turns on graphile-worker's own
 * batching (local queue of `concurrency` × 4 jobs, batched completions: `preset.worker.localQueue`,
 * `completeJobBatchDelay`, release notes of 0.16). Returns jobs per second.
 */
export async function graphileDrain(
  db: Db,
  url: string,
  work: PeerWork,
  jobs: number,
  concurrency: number,
  batched: boolean,
): Promise<number> {
  await runMigrations({ connectionString: url, logger: silent });
  await db`select graphile_worker.add_job('bench_book', json_build_object('n', g)) from generate_series(1, ${jobs}) g`;
  await db`analyze graphile_worker._private_jobs`;
  const started = performance.now();
  const runner = await run({
    connectionString: url,
    concurrency,
    maxPoolSize: concurrency + 2,
    noHandleSignals: true,
    pollInterval: 20,
    logger: silent,
    preset: batched ? { worker: { localQueue: { size: concurrency * 4 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } } : {},
    taskList: {
      bench_book: async (payload, helpers) => {
        const n = (payload as { n: number }).n;
        await helpers.withPgClient((client) => client.query(work.text, work.params(n)));
      },
    },
  });
  for (;;) {
    const [left] = await db<{ n: number }[]>`select count(*)::int as n from graphile_worker.jobs where task_identifier = 'bench_book'`;
    if ((left?.n ?? 1) === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const seconds = (performance.now() - started) / 1000;
  await runner.stop();
  return jobs / seconds;
}
