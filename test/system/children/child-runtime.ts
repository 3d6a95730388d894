// Shared by the crash children: how they read their input, report progress, and wait to be killed.
import { writeSync } from "node:fs";
import { connect, type Db } from "../../../src/db/db.ts";
import type { VerifiedEvent } from "../../../src/providers/provider.ts";
import { stripeSubject } from "../../../src/providers/stripe.ts";

/** How long a child that is never killed lives before it exits by itself (status 3). */
const SELF_EXIT_MS = 30_000;

/** The child's input: database URL from argv[2], event body (exact bytes) from stdin; a one-connection pool. */
export async function childInput(): Promise<{ db: Db; event: VerifiedEvent }> {
  setTimeout(() => {
    report("SELF_EXIT");
    process.exit(3);
  }, SELF_EXIT_MS);
  const url = process.argv[2];
  if (!url) throw new Error("Cannot start child: usage is `bun <script> <database-url> < body.json`");
  const body = await Bun.stdin.text();
  // Not helpers.ts's verified(): importing helpers.ts would import test/setup.ts and start a server.
  const payload = JSON.parse(body) as Record<string, unknown>;
  const event = { id: String(payload.id), type: String(payload.type), payload, subject: stripeSubject(payload), body };
  return { db: connect(url, { max: 1, applicationName: "crash-child" }), event };
}

/** Writes one line to stdout with a direct write(2), so the parent sees it before any kill. */
export function report(line: string): void {
  writeSync(1, `${line}\n`);
}

/** Never resolves: the child sits here until the parent SIGKILLs it (or the self-exit timer fires). */
export function hangUntilKilled(): Promise<never> {
  return new Promise<never>(() => {});
}
