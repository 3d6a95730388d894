import type { Tx } from "../db/db.ts";
import { handlerTable, PermanentError, type HandlerContext } from "./handler-table.ts";

/**
 * GitHub `push` (GitHub docs, "Webhook events and payloads", push): writes one `GitHubPush` outbox
 * message `{ repository, ref, before, after, commits, pusher, event_id }` keyed by `<repository>@<after>`.
 * Once per push: a push is one delivery, and a redelivery keeps its `X-GitHub-Delivery`, the inbox key,
 * so the handler never runs twice for it (a second event type carrying the same push would need a
 * business-key table, as the Stripe handlers have). Runs inside the inbox transaction.
 * @throws PermanentError when the payload has no repository.full_name, ref, before or after.
 */
export async function recordPush(tx: Tx, push: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const repository = (push.repository as { full_name?: unknown } | undefined)?.full_name;
  const { ref, before, after } = push;
  if (typeof repository !== "string" || typeof ref !== "string" || typeof before !== "string" || typeof after !== "string")
    throw new PermanentError("Cannot record GitHub push: repository.full_name, ref, before and after are required");
  const commits = Array.isArray(push.commits) ? push.commits.length : 0;
  const pusher = (push.pusher as { name?: unknown } | undefined)?.name;
  await tx`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload)
    values ('GitHubRepository', ${`${repository}@${after}`}, 'GitHubPush',
            jsonb_build_object('repository', ${repository}::text, 'ref', ${ref}::text, 'before', ${before}::text,
                               'after', ${after}::text, 'commits', ${commits}::int,
                               'pusher', ${typeof pusher === "string" ? pusher : null}::text, 'event_id', ${context.eventId}::text))
  `;
}

/** The GitHub example handler table: `push` (see {@link recordPush}); every other event is recorded `ignored`. */
export const gitHubHandlers = handlerTable({ push: recordPush });
