// GitHub through the provider contract suite (verify only) and the delivery contract (createApp, every
// mode, duplicates, concurrency, bad input), with the fixtures of test/fixtures/github/.
import { join } from "node:path";
import { afterAll, expect, test } from "bun:test";
import { readProviderFixtures } from "../../src/dev/provider-delivery.ts";
import { gitHubHandlers } from "../../src/handlers/github-pushes.ts";
import { gitHubProvider, signGitHubPayload } from "../../src/providers/github.ts";
import { createApp } from "../../src/receiver/app.ts";
import { FIXTURES_DIR, freshDatabase } from "../support/helpers.ts";
import { outboxRows, providerDeliverySuite } from "./provider-delivery-suite.ts";
import { providerContractSuite } from "./provider-suite.ts";

const SECRETS = ["github-secret-one-0123456789", "github-secret-two-9876543210"] as const;
const DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
const fixtures = readProviderFixtures([join(FIXTURES_DIR, "github")]);
/** The database of this file's own tests (each suite has one of its own). */
const fresh = await freshDatabase();
afterAll(() => fresh.drop());
const issue = fixtures.find((f) => f.name === "issues-opened.json")!;

const headers = async (body: string, secret: string, event = "issues") => ({
  "x-github-event": event,
  "x-github-delivery": DELIVERY,
  "x-hub-signature-256": await signGitHubPayload(body, secret),
});

providerContractSuite({
  provider: gitHubProvider,
  sign: (body, secret) => headers(body, secret),
  secrets: SECRETS,
  sample: {
    body: issue.body,
    id: DELIVERY,
    type: "issues.opened",
    subject: { object: JSON.parse(issue.body) as Record<string, unknown>, key: "Codertocat/Hello-World" },
  },
  requiredHeaders: ["x-hub-signature-256", "x-github-event", "x-github-delivery"],
  malformed: (h) => [
    { ...h, "x-hub-signature-256": h["x-hub-signature-256"]!.replace("sha256=", "sha1=") },
    { ...h, "x-hub-signature-256": `${h["x-hub-signature-256"]}00` },
    { ...h, "x-hub-signature-256": h["x-hub-signature-256"]!.toUpperCase() },
    { ...h, "x-github-event": "Issues Event" },
    { ...h, "x-github-delivery": "id with spaces" },
  ],
  notEvents: [JSON.stringify([1, 2]), JSON.stringify("text"), "not json", JSON.stringify({ action: 42 })],
  timestamped: false,
});

test("`verifyGitHub()` names an event without action by X-GitHub-Event alone, and matches GitHub's documented example signature", async () => {
  // GitHub docs, "Validating webhook deliveries", "Testing the webhook payload validation": secret
  // "It's a Secret to Everybody", payload "Hello, World!".
  expect(await signGitHubPayload("Hello, World!", "It's a Secret to Everybody")).toBe(
    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
  );
  const push = fixtures.find((f) => f.name === "push-feature.json")!;
  const event = await gitHubProvider.verify({
    body: push.body,
    headers: new Headers(await headers(push.body, SECRETS[0], "push")),
    secrets: SECRETS,
    toleranceSec: 300,
    nowMs: Date.now(),
  });
  expect({ id: event.id, type: event.type, key: event.subject.key }).toEqual({ id: DELIVERY, type: "push", key: "Codertocat/Hello-World" });
});

providerDeliverySuite({
  provider: gitHubProvider,
  signer: "github",
  handlers: gitHubHandlers,
  secrets: SECRETS,
  fixtures,
  inbox: {
    "d2a4b3b0-7742-11e9-9d1a-6b7c3c0b2a17": "ignored",
    "d2a6e0c0-7742-11e9-8a5c-3e1f0ad0a0c1": "ignored",
    "e1c3b2a0-7742-11e9-9b5d-7f0e3c4d1a22": "processed",
    "e5f7a8d0-7742-11e9-8f3e-2a4c6b1e9d55": "processed",
  },
  endState: outboxRows,
  unsignedIdHeader: "x-github-delivery",
  expected: [
    {
      aggregate_type: "GitHubRepository",
      aggregate_id: "Codertocat/Hello-World",
      event_type: "GitHubPush",
      payload: {
        ref: "refs/heads/feature/inbox",
        after: "f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
        before: "a10867b14bb761a232cd80139fbd4c0d33264240",
        pusher: "Codertocat",
        commits: 1,
        event_id: "e5f7a8d0-7742-11e9-8f3e-2a4c6b1e9d55",
        repository: "Codertocat/Hello-World",
      },
    },
    {
      aggregate_type: "GitHubRepository",
      aggregate_id: "Codertocat/Hello-World",
      event_type: "GitHubPush",
      payload: {
        ref: "refs/heads/main",
        after: "0000000000000000000000000000000000000000",
        before: "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        pusher: "Codertocat",
        commits: 0,
        event_id: "e1c3b2a0-7742-11e9-9b5d-7f0e3c4d1a22",
        repository: "Codertocat/Hello-World",
      },
    },
  ],
  bad: (signed) => [
    { why: "tampered body", delivery: { ...signed, body: `${signed.body} ` }, code: "signature_mismatch" },
    {
      why: "another secret",
      delivery: { ...signed, headers: { ...signed.headers, "x-hub-signature-256": `sha256=${"0".repeat(64)}` } },
      code: "signature_mismatch",
    },
    {
      why: "no signature",
      delivery: { ...signed, headers: Object.fromEntries(Object.entries(signed.headers).filter(([k]) => k !== "x-hub-signature-256")) },
      code: "signature_missing",
    },
  ],
});

const app = createApp({
  db: fresh.db,
  endpoints: [{ name: "repos", provider: gitHubProvider, secrets: SECRETS, handlers: gitHubHandlers, mode: "sync" }],
  log: () => {},
});
const ZERO = "0".repeat(40);
const COMMIT = "f95f852bd8fca8fcc58a9a2d6c842781e32a215e";
/** push-main.json with `changes` (ref, before, after, deleted), as GitHub would sign it. */
const pushBody = (changes: Record<string, unknown>) =>
  JSON.stringify({ ...(JSON.parse(fixtures.find((f) => f.name === "push-main.json")!.body) as Record<string, unknown>), ...changes });
/** Posts a signed push under X-GitHub-Delivery `delivery`; returns the outcome. */
async function sendPush(body: string, delivery: string): Promise<string> {
  const res = await app.fetch(
    new Request("http://receiver.test/webhooks/github/repos", {
      method: "POST",
      headers: { "content-type": "application/json", ...(await headers(body, SECRETS[0], "push")), "x-github-delivery": delivery },
      body,
    }),
  );
  return ((await res.json()) as { outcome: string }).outcome;
}
const pushMessages = () =>
  fresh.db<{ ref: string; message_id: string }[]>`select payload->>'ref' as ref, message_id from outbox order by id`;

test("`recordPush()` gives distinct pushes with the same `after` distinct message ids: two branches deleted, one commit pushed to two refs", async () => {
  await fresh.db`truncate webhook_inbox, outbox`;
  const pushes = [
    { ref: "refs/heads/old-a", before: "6113728f27ae82c7b1a177c8d03f9e96e0adf246", after: ZERO, deleted: true },
    { ref: "refs/heads/old-b", before: "a10867b14bb761a232cd80139fbd4c0d33264240", after: ZERO, deleted: true },
    { ref: "refs/heads/main", before: "a10867b14bb761a232cd80139fbd4c0d33264240", after: COMMIT, deleted: false },
    { ref: "refs/heads/release", before: ZERO, after: COMMIT, deleted: false },
  ];
  for (const [i, push] of pushes.entries()) expect(await sendPush(pushBody(push), `delivery-${i}`)).toBe("processed");
  const rows = await pushMessages();
  expect(rows.map((r) => r.ref)).toEqual(pushes.map((p) => p.ref));
  expect(new Set(rows.map((r) => r.message_id)).size).toBe(4);
});

test("`recordPush()` writes no second message for a captured push resent under a fresh X-GitHub-Delivery (the header is not signed)", async () => {
  await fresh.db`truncate webhook_inbox, outbox`;
  const captured = pushBody({ ref: "refs/heads/old-a", before: "6113728f27ae82c7b1a177c8d03f9e96e0adf246", after: ZERO, deleted: true });
  expect(await sendPush(captured, "delivery-original")).toBe("processed");
  for (const i of [1, 2]) expect(await sendPush(captured, `replayed-${i}`)).toBe("processed"); // a new inbox row each
  expect((await pushMessages()).map((r) => r.ref)).toEqual(["refs/heads/old-a"]);
  expect((await fresh.db<{ n: number }[]>`select count(*)::int as n from webhook_inbox`)[0]?.n).toBe(3);
});
