// Edge file: the naive worker peer of `bun run bench`'s drain, a peer and not product code. What a careful
// first worker does with the seed's SQL (§6): per event, `claim_next` in its own short transaction (one row,
// attempts counted, leased), then `process_claimed` in a second one (statement_timeout, FOR UPDATE
// re-check, the seed's invoice.paid statements, processed_at), on the seed-shaped naive_inbox.
import postgres from "postgres";
import { applyInvoicePaid } from "./naive-inbox.ts";
import { benchEventBody } from "./payload.ts";

/**
 * Records `n` unprocessed `invoice.paid` events (payload.ts bodies, ids `evt_bench_<run>_<i>`) in
 * `naive_inbox` at endpoint `naive-drain`, 500 per statement. `run` must be identifier-safe.
 */
export async function prefillNaiveBacklog(sql: postgres.Sql, run: string, n: number): Promise<void> {
  for (let lo = 0; lo < n; lo += 500) {
    const rows = Array.from({ length: Math.min(500, n - lo) }, (_, i) => {
      const body = benchEventBody(run, lo + i);
      const event = JSON.parse(body) as { id: string; type: string };
      return { provider: "stripe", endpoint: "naive-drain", event_id: event.id, event_type: event.type, payload: body };
    });
    await sql`
      insert into naive_inbox (provider, endpoint, event_id, event_type, payload)
      select provider, endpoint, event_id, event_type, payload::jsonb
        from jsonb_to_recordset(${sql.json(rows)}) as r(provider text, endpoint text, event_id text, event_type text, payload text)
    `;
  }
}

/**
 * Drains every due row of `naive_inbox` at `url` with `slots` independent loops, each on its own
 * connection doing the seed's two transactions per event, until a claim finds nothing. Returns the
 * events processed and the seconds from start to the last one.
 * @throws whatever PostgreSQL threw (the bench stops: no row is expected to fail).
 */
export async function naiveDrain(url: string, slots: number): Promise<{ processed: number; seconds: number }> {
  const sql = postgres(url, { max: slots, onnotice: () => {} });
  let processed = 0;
  const t0 = performance.now();
  const slot = async (): Promise<void> => {
    for (;;) {
      const [key] = await sql<{ provider: string; endpoint: string; event_id: string }[]>`
        update naive_inbox w
           set attempts = w.attempts + 1, available_at = now() + interval '2 minutes'
          from (select provider, endpoint, event_id from naive_inbox
                 where processed_at is null and available_at <= now() and attempts < 10
                 order by available_at limit 1 for update skip locked) picked
         where (w.provider, w.endpoint, w.event_id) = (picked.provider, picked.endpoint, picked.event_id)
        returning w.provider, w.endpoint, w.event_id
      `;
      if (!key) return;
      await sql.begin(async (tx) => {
        await tx`select set_config('statement_timeout', '30s', true)`;
        const [row] = await tx<{ event_type: string; payload: { id: string; data: { object: Record<string, unknown> } } }[]>`
          select event_type, payload from naive_inbox
           where provider = ${key.provider} and endpoint = ${key.endpoint} and event_id = ${key.event_id} and processed_at is null
             for update
        `;
        if (!row) return;
        if (row.event_type === "invoice.paid") await applyInvoicePaid(tx, { ...row.payload.data.object, event_id: row.payload.id });
        await tx`
          update naive_inbox set processed_at = now(), last_error = null
           where provider = ${key.provider} and endpoint = ${key.endpoint} and event_id = ${key.event_id}
        `;
      });
      processed++;
    }
  };
  try {
    await Promise.all(Array.from({ length: slots }, slot));
    return { processed, seconds: (performance.now() - t0) / 1000 };
  } finally {
    await sql.end({ timeout: 5 });
  }
}
