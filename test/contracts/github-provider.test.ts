// GitHub through the provider contract suite (verify only) and the delivery contract (createApp, every
// mode, duplicates, concurrency, bad input), with the fixtures of test/fixtures/github/.
import { join } from "node:path";
import { expect, test } from "bun:test";
import { readProviderFixtures } from "../../src/dev/provider-delivery.ts";
import { gitHubHandlers } from "../../src/handlers/github-pushes.ts";
import { gitHubProvider, signGitHubPayload } from "../../src/providers/github.ts";
import { FIXTURES_DIR } from "../support/helpers.ts";
import { outboxRows, providerDeliverySuite } from "./provider-delivery-suite.ts";
import { providerContractSuite } from "./provider-suite.ts";

const SECRETS = ["github-secret-one-0123456789", "github-secret-two-9876543210"] as const;
const DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
const fixtures = readProviderFixtures([join(FIXTURES_DIR, "github")]);
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
  expected: [
    {
      aggregate_type: "GitHubRepository",
      aggregate_id: "Codertocat/Hello-World@0000000000000000000000000000000000000000",
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
    {
      aggregate_type: "GitHubRepository",
      aggregate_id: "Codertocat/Hello-World@f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
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
