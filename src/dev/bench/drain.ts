// Edge file: the worker drain of `bun run bench`, run with a given tree's own worker code.
import { join } from "node:path";
import type { connect as Connect, Db } from "../../db/db.ts";
import type { handlerTables as HandlerTables } from "../../receiver/endpoints.ts";
import type { runWorker as RunWorker } from "../../worker/worker.ts";
import type { InsertInbox } from "./backlog.ts";
import { checkpoint, walBytesSince, walPosition } from "./wal.ts";

/** What the drain needs of one tree's code: its pool, handler tables, worker loop and inbox insert. */
export interface TreeCode {
  connect: typeof Connect;
  handlerTables: typeof HandlerTables;
  runWorker: typeof RunWorker;
  insertInbox: InsertInbox;
}

/**
 * The modules of the tree at `root` (this repository's, or an older commit's extracted by before-tree.ts),
 * imported from its own files: its worker, handlers and insert run as that commit wrote them. Their
 * signatures are taken to be this tree's (true back to sql/0026).
 */
export async function loadTree(root: string): Promise<TreeCode> {
  const from = (path: string) => import(join(root, "src", path));
  const [db, endpoints, worker, inbox] = await Promise.all([
    from("db/db.ts"),
    from("receiver/endpoints.ts"),
    from("worker/worker.ts"),
    from("inbox/inbox.ts"),
  ]);
  return { connect: db.connect, handlerTables: endpoints.handlerTables, runWorker: worker.runWorker, insertInbox: inbox.insertInbox };
}

/** One drain: seconds from the worker's start to the last row settled, WAL bytes meanwhile, whether a checkpoint preceded it. */
export interface Drained {
  seconds: number;
  walBytes: number;
  checkpointed: boolean;
}

/**
 * Drains the `expected` rows queued at `url` with `code`'s `runWorker` at `slots` slots and `batch` rows per
 * transaction (the worker's default when undefined; a tree before batches ignores it) (its own pool of
 * slots + 1 connections, no LISTEN, a 20 ms poll: the backlog is there from the start). Statistics are
 * refreshed first (`analyze`, as autovacuum would for a long-lived table) and a checkpoint taken, through
 * `db` (a pool on the same database), which also reads the WAL position. Done when the worker has logged
 * an outcome for every row (its one line per row): no polling query competes with the drain.
 * @throws Error when a row ends otherwise than `processed` or the worker stops before the last one.
 */
export async function drainBacklog(code: TreeCode, url: string, db: Db, slots: number, expected: number, batch?: number): Promise<Drained> {
  await db`analyze`;
  const checkpointed = await checkpoint(db);
  const lsn = await walPosition(db);
  const pool = code.connect(url, { max: slots + 1, applicationName: "bench worker" });
  const controller = new AbortController();
  let settled = 0;
  let drained!: () => void;
  let failed!: (err: Error) => void;
  const allSettled = new Promise<void>((resolve, reject) => ((drained = resolve), (failed = reject)));
  const t0 = performance.now();
  const done = code.runWorker({
    db: pool,
    tables: code.handlerTables,
    signal: controller.signal,
    concurrency: slots,
    ...(batch === undefined ? {} : { batch }),
    listen: false,
    pollMs: 20,
    log: (line) => {
      if (line.outcome === undefined) return;
      if (line.outcome !== "processed")
        failed(new Error(`worker drain: ${String(line.event_id)} ended ${String(line.outcome)}: ${String(line.error ?? "")}`));
      else if (++settled === expected) drained();
    },
  });
  void done.then(() => failed(new Error(`worker drain: the worker stopped after ${settled} of ${expected} rows`)), failed);
  try {
    await allSettled;
    const seconds = (performance.now() - t0) / 1000;
    return { seconds, walBytes: await walBytesSince(db, lsn), checkpointed };
  } finally {
    controller.abort();
    await done.catch(() => {});
    await pool.end();
  }
}
