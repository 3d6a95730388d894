// Edge file: the seed's inbox and outbox tables for the bench's naive peer (naive-peer.ts) and pgbench's
// seed script (scripts.ts seedSyncScript): one inbox row per event with its payload in it, keyed by the
// seed's (provider, endpoint, event_id), as sql/0001 was, and a plain outbox. Tables of their own, so the
// peer stays the seed's SQL whatever shape ours take (since sql/0027 webhook_inbox holds no payload; since
// 0028 outbox message ids are unique).

/** `create table if not exists naive_inbox (…)` and `naive_outbox`: run by `bun run bench` on its database and by the peer at start. */
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
  );
  create table if not exists naive_outbox (
    id             bigint      generated always as identity primary key,
    aggregate_type text        not null,
    aggregate_id   text        not null,
    event_type     text        not null,
    payload        jsonb       not null,
    created_at     timestamptz not null default now()
  )`;
