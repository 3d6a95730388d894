import type { Tx } from "../db/db.ts";
import { handlerTable, PermanentError, type HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";

/**
 * GitHub `push` (GitHub docs, "Webhook events and payloads", push): writes one `GitHubPush` outbox
 * message `{ repository, ref, before, after, commits, pusher, event_id }` for the repository, told apart
 * by `<ref> <before> <after>`: what the push moved, all of it signed. GitHub signs the body only, not
 * `X-GitHub-Delivery` (the inbox key), so a captured push resent under a fresh delivery id writes
 * nothing again ({@link insertOutbox}), while two pushes with the same `after` (two branches deleted,
 * one commit pushed to two refs) are two messages. Runs inside the inbox transaction.
 * @throws PermanentError when the payload has no repository.full_name, ref, before or after.
 */
export async function recordPush(tx: Tx, push: Record<string, unknown>, context: HandlerContext): Promise<void> {
  const repository = (push.repository as { full_name?: unknown } | undefined)?.full_name;
  const { ref, before, after } = push;
  if (typeof repository !== "string" || typeof ref !== "string" || typeof before !== "string" || typeof after !== "string")
    throw new PermanentError("Cannot record GitHub push: repository.full_name, ref, before and after are required");
  const commits = Array.isArray(push.commits) ? push.commits.length : 0;
  const name = (push.pusher as { name?: unknown } | undefined)?.name;
  const payload = { repository, ref, before, after, commits, pusher: typeof name === "string" ? name : null, event_id: context.eventId };
  const messageKey = `${ref} ${before} ${after}`; // a ref name holds no space (git check-ref-format)
  await insertOutbox(tx, { account: "", aggregate: ["GitHubRepository", repository], eventType: "GitHubPush", messageKey }, payload);
}

/** The GitHub example handler table: `push` (see {@link recordPush}); every other event is recorded `ignored`. */
export const gitHubHandlers = handlerTable({ push: recordPush });
