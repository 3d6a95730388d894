// Edge file: the seed's inbox table for the bench's naive peer (naive-peer.ts) and pgbench's seed script
// (scripts.ts seedSyncScript): one row per event with its payload in it, keyed by the seed's
// (provider, endpoint, event_id), as sql/0001 was. Its own table, so the peer stays the seed's SQL
// whatever shape our webhook_inbox takes (since sql/0027 it holds no payload).

/** `create table if not exists naive_inbox (…)`: run by `bun run bench` on its database and by the peer at start. */
export const NAIVE_INBOX_DDL = `
  create table if not exists naive_inbox (
    provider     text        not null,
    endpoint     text        not null,
    event_id     text        not null,
    event_type   text        not null,
    payload      jsonb       not null,
    received_at  timestamptz not null default now(),
    processed_at timestamptz,
    primary key (provider, endpoint, event_id)
  )`;
