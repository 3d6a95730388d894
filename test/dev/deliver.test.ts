import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { createApp } from "../../src/receiver/app.ts";
import { deliver, printableUrl, type EventFile } from "../../src/dev/deliver.ts";
import { handlersFor, stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { readProviderFixtures } from "../../src/dev/provider-delivery.ts";
import { providerNamed } from "../../src/providers/registry.ts";
import { stripeProvider } from "../../src/providers/stripe.ts";
import { count, FIXTURES_DIR, freshDatabase, lifecycle, SECRET } from "../support/helpers.ts";

const fresh = await freshDatabase();
afterAll(() => fresh.drop());

const URL = "http://receiver.test/webhooks/stripe";
const events: EventFile[] = lifecycle();
const idOf = (body: string): string => (JSON.parse(body) as { id: string }).id;

/** What a fake receiver saw of one request. */
interface Seen {
  id: string;
  body: string;
  signature: string;
  contentType: string | null;
  verified: boolean;
}

/** A fake receiver that records and verifies every request, then answers with `answer(n)` (n = 1-based request number). */
function fakeReceiver(answer: (n: number, seen: Seen) => Response | Promise<Response>) {
  const seen: Seen[] = [];
  const fetch = async (request: Request): Promise<Response> => {
    const body = await request.text();
    const signature = request.headers.get("stripe-signature") ?? "";
    let verified = false;
    try {
      await stripeProvider.verify({ body, headers: request.headers, secrets: [SECRET], toleranceSec: 300, nowMs: Date.now() });
      verified = true;
    } catch {
      verified = false;
    }
    const entry = { id: idOf(body), body, signature, contentType: request.headers.get("content-type"), verified };
    seen.push(entry);
    return answer(seen.length, entry);
  };
  return { seen, fetch };
}

const processed = () => Response.json({ outcome: "processed" });

describe("deliver()", () => {
  test("`deliver()` delivers the shuffled lifecycle 3 times with 8 in flight to a real app and reports the outcomes", async () => {
    const app = createApp({ db: fresh.db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]), log: () => {} });
    const summary = await deliver(events, {
      url: URL,
      secret: SECRET,
      copies: 3,
      concurrency: 8,
      shuffle: true,
      seed: 7,
      retryBaseMs: 1,
      fetch: app.fetch,
    });
    expect(summary).toEqual({
      deliveries: 36,
      requests: 36,
      outcomes: { processed: 11, ignored: 1, duplicate: 24 },
      retried: {},
      failures: [],
    });
    expect(await count(fresh.db, "webhook_inbox")).toBe(12);
    expect(await count(fresh.db, "ledger_entries")).toBe(2);
    expect(await count(fresh.db, "outbox")).toBe(2);
    const invoices = await fresh.db`select id, status from invoices order by id`;
    expect(invoices.map((r) => `${r.id}:${r.status}`)).toEqual([
      "in_1SkA1pLgUG5tbmjcQ7nB2vXa:paid",
      "in_1SkA2qLgUG5tbmjcR8oC3wYb:void",
      "in_1SkA3rLgUG5tbmjcS9pD4xZc:paid",
    ]);
  });

  test("`deliver()` retries a 500 twice with a fresh, valid signature each attempt and the exact bytes", async () => {
    const [event] = events;
    if (!event) throw new Error("no fixtures");
    const receiver = fakeReceiver((n) => (n <= 2 ? new Response("oops", { status: 500 }) : processed()));
    const summary = await deliver([event], { url: URL, secret: SECRET, retryBaseMs: 1, fetch: receiver.fetch });
    expect(summary).toEqual({ deliveries: 1, requests: 3, outcomes: { processed: 1 }, retried: { "500": 2 }, failures: [] });
    expect(receiver.seen).toHaveLength(3);
    for (const s of receiver.seen) {
      expect(s.verified).toBe(true);
      expect(s.signature).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
      expect(s.body).toBe(event.body);
      expect(s.contentType).toBe("application/json; charset=utf-8");
    }
  });

  test("`deliver()` reports failures after `attempts` tries against a receiver that always fails", async () => {
    const two = events.slice(0, 2);
    const down = fakeReceiver(() => new Response("unavailable", { status: 503 }));
    const summary = await deliver(two, { url: URL, secret: SECRET, attempts: 3, retryBaseMs: 1, fetch: down.fetch });
    expect(summary.deliveries).toBe(2);
    expect(summary.requests).toBe(6);
    expect(down.seen).toHaveLength(6);
    expect(summary.outcomes).toEqual({ failed: 2 });
    expect(summary.retried).toEqual({ "503": 6 });
    expect(summary.failures.map((f) => f.status)).toEqual(["503", "503"]);
    expect(summary.failures.map((f) => f.name).sort()).toEqual(two.map((e) => e.name).sort());
  });

  test("`deliver()` counts a connection failure as `network` and never throws", async () => {
    const [event] = events;
    if (!event) throw new Error("no fixtures");
    let calls = 0;
    const refuse = async (): Promise<Response> => {
      calls++;
      throw new TypeError("connect ECONNREFUSED");
    };
    const summary = await deliver([event], {
      url: URL,
      secret: SECRET,
      attempts: 4,
      retryBaseMs: 1,
      giveUpAfterConnectionFailures: 10,
      fetch: refuse,
    });
    expect(calls).toBe(4);
    expect(summary).toEqual({
      deliveries: 1,
      requests: 4,
      outcomes: { failed: 1 },
      retried: { network: 4 },
      failures: [{ name: event.name, status: "network" }],
    });
  });

  test("`deliver()` gives up the whole run after 3 connection failures in a row instead of retrying every delivery", async () => {
    let calls = 0;
    const refuse = async (): Promise<Response> => {
      calls++;
      throw new TypeError("connect ECONNREFUSED");
    };
    const summary = await deliver(events, { url: URL, secret: SECRET, attempts: 6, retryBaseMs: 1, fetch: refuse });
    expect(calls).toBe(3);
    expect(summary).toEqual({
      deliveries: 12,
      requests: 3,
      outcomes: { failed: 1 },
      retried: { network: 3 },
      failures: [{ name: events[0]?.name ?? "", status: "network" }],
      gaveUp: { reason: `3 connection failures in a row, no answer from ${URL} in between`, notSent: 11 },
    });
  });

  test("`deliver()` stops when its signal is aborted: requests in flight finish, the rest count as not sent", async () => {
    const interrupt = new AbortController();
    let calls = 0;
    const answerThenInterrupt = async (): Promise<Response> => {
      if (++calls === 3) interrupt.abort(); // Ctrl-C during the third request
      return processed();
    };
    const summary = await deliver(events, {
      url: URL,
      secret: SECRET,
      concurrency: 1,
      fetch: answerThenInterrupt,
      signal: interrupt.signal,
    });
    expect(summary).toEqual({
      deliveries: 12,
      requests: 3,
      outcomes: { processed: 3 },
      retried: {},
      failures: [],
      gaveUp: { reason: "interrupted", notSent: 9 },
    });
  });

  test("`deliver()` keeps going when answers come between connection failures", async () => {
    let calls = 0;
    const flaky = async (): Promise<Response> => {
      if (++calls % 2 === 1) throw new TypeError("connect ECONNRESET");
      return processed();
    };
    const summary = await deliver(events.slice(0, 6), { url: URL, secret: SECRET, retryBaseMs: 1, fetch: flaky });
    expect(summary).toEqual({ deliveries: 6, requests: 12, outcomes: { processed: 6 }, retried: { network: 6 }, failures: [] });
  });

  test("`deliver()` does not retry a 400 and reports it with the answer's error code", async () => {
    const refusing = fakeReceiver(() => Response.json({ error: "signature_mismatch", message: "No signature matches" }, { status: 400 }));
    const summary = await deliver(events.slice(0, 2), { url: URL, secret: SECRET, retryBaseMs: 1, fetch: refusing.fetch });
    expect(summary).toEqual({
      deliveries: 2,
      requests: 2,
      outcomes: { failed: 2 },
      retried: {},
      failures: events.slice(0, 2).map((e) => ({ name: e.name, status: "400 signature_mismatch" })),
    });
  });

  test("`deliver()` retries 408, 409, 429 and 5xx, naming each answer's error code", async () => {
    const answers = [
      Response.json({ error: "overloaded" }, { status: 429 }),
      new Response("", { status: 409 }),
      new Response("", { status: 408 }),
      Response.json({ error: "database_unavailable" }, { status: 503 }),
    ];
    const receiver = fakeReceiver((n) => answers[n - 1] ?? processed());
    const [event] = events;
    if (!event) throw new Error("no fixtures");
    const summary = await deliver([event], { url: URL, secret: SECRET, retryBaseMs: 1, fetch: receiver.fetch });
    expect(summary).toEqual({
      deliveries: 1,
      requests: 5,
      outcomes: { processed: 1 },
      retried: { "429 overloaded": 1, "409": 1, "408": 1, "503 database_unavailable": 1 },
      failures: [],
    });
  });

  test("`bun run deliver` to a port nobody listens on gives up after a few attempts, says so and exits 1", async () => {
    const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = listener.port;
    listener.stop(true);
    const proc = Bun.spawn(
      [
        process.execPath,
        "src/dev/bin/deliver.ts",
        "test/fixtures/stripe/invoice-lifecycle",
        "--url",
        `http://127.0.0.1:${port}/webhooks/stripe`,
        "--secret",
        SECRET,
      ],
      {
        cwd: join(import.meta.dir, "..", ".."),
        stdout: "pipe",
        stderr: "pipe",
        timeout: 20_000, // a bound on a hung run, not a speed assertion: without giving up it takes over a minute
      },
    );
    const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    expect({ code: proc.exitCode, signal: proc.signalCode }).toEqual({ code: 1, signal: null });
    expect(stdout).toContain("Could not deliver 12 of 12 deliveries");
    expect(stderr).toContain("Gave up: 3 connection failures in a row");
    expect(stderr).toContain("11 deliveries not sent");
  }, 30_000);

  test("`bun run deliver` interrupted by SIGINT (Ctrl-C) prints its summary with what was not sent and exits 130", async () => {
    // A receiver that answers each delivery after 300 ms, so the run is still going when SIGINT comes.
    let answered = 0;
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: async () => (await Bun.sleep(300), answered++, Response.json({ outcome: "processed" })),
    });
    try {
      const proc = Bun.spawn(
        [
          process.execPath,
          "src/dev/bin/deliver.ts",
          "test/fixtures/stripe/invoice-lifecycle",
          "--url",
          `http://127.0.0.1:${server.port}/webhooks/stripe`,
          "--secret",
          SECRET,
        ],
        { cwd: join(import.meta.dir, "..", ".."), stdout: "pipe", stderr: "pipe", timeout: 20_000 },
      );
      const output = Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
      while (answered < 2) await Bun.sleep(20);
      process.kill(proc.pid, "SIGINT");
      const [stdout, stderr] = await output;
      await proc.exited;
      expect({ code: proc.exitCode, signal: proc.signalCode }).toEqual({ code: 130, signal: null });
      const sent = answered; // the one in flight at SIGINT finished too
      expect(sent).toBeLessThan(12);
      expect(stdout).toContain(`Could not deliver ${12 - sent} of 12 deliveries (12 event(s) × 1)`);
      expect(stdout).toContain(`${sent} answered 2xx, 0 failed, ${12 - sent} not sent`);
      expect(stderr).toContain(`Interrupted: ${12 - sent} deliveries not sent.`);
    } finally {
      server.stop(true);
    }
  }, 30_000);

  test("`bun run deliver --endpoint ops` signs with STRIPE_WEBHOOK_SECRET_OPS when set, not STRIPE_WEBHOOK_SECRET (as serve verifies that endpoint)", async () => {
    const OPS_SECRET = "whsec_ops_endpoint_secret_0123456789";
    let verified = 0;
    let refused = 0;
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: async (request) => {
        const body = await request.text();
        try {
          await stripeProvider.verify({ body, headers: request.headers, secrets: [OPS_SECRET], toleranceSec: 300, nowMs: Date.now() });
          verified++;
          return Response.json({ outcome: "processed" });
        } catch {
          refused++;
          return Response.json({ error: "signature_mismatch" }, { status: 400 });
        }
      },
    });
    try {
      const proc = Bun.spawn(
        [
          process.execPath,
          "src/dev/bin/deliver.ts",
          "test/fixtures/stripe/invoice-lifecycle",
          "--endpoint",
          "ops",
          "--url",
          `http://127.0.0.1:${server.port}/webhooks/stripe/ops`,
        ],
        {
          cwd: join(import.meta.dir, "..", ".."),
          env: { PATH: process.env.PATH ?? "", STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_WEBHOOK_SECRET_OPS: OPS_SECRET },
          stdout: "pipe",
          stderr: "pipe",
          timeout: 20_000,
        },
      );
      const [stdout] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
      expect({ code: proc.exitCode, verified, refused }).toEqual({ code: 0, verified: 12, refused: 0 });
      expect(stdout).toContain("Delivered 12 deliveries");
    } finally {
      server.stop(true);
    }
  }, 30_000);

  test("`bun run deliver` never prints the password or user name of --url, on success or when it gives up", async () => {
    const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = listener.port;
    listener.stop(true);
    const proc = Bun.spawn(
      [
        process.execPath,
        "src/dev/bin/deliver.ts",
        "test/fixtures/stripe/invoice-lifecycle",
        "--url",
        `http://someuser:TOPSECRETPW@127.0.0.1:${port}/webhooks/stripe`,
        "--secret",
        SECRET,
      ],
      {
        cwd: join(import.meta.dir, "..", ".."),
        stdout: "pipe",
        stderr: "pipe",
        timeout: 20_000, // a bound on a hung run, not a speed assertion
      },
    );
    const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    expect(proc.exitCode).toBe(1);
    expect(stderr).toContain(
      `Gave up: 3 connection failures in a row, no answer from http://***@127.0.0.1:${port}/webhooks/stripe in between`,
    );
    expect(stdout).toContain(`) to http://***@127.0.0.1:${port}/webhooks/stripe in `);
    expect(stdout + stderr).not.toContain("TOPSECRETPW");
    expect(stdout + stderr).not.toContain("someuser");
  }, 30_000);

  test("`printableUrl()` hides user-info, keeps a URL without it, and shows no part of an unparseable one", () => {
    expect(printableUrl("http://u:pw@example.test:8080/hook?x=1")).toBe("http://***@example.test:8080/hook?x=1");
    expect(printableUrl("http://u@example.test/hook")).toBe("http://***@example.test/hook");
    expect(printableUrl("http://example.test/hook")).toBe("http://example.test/hook");
    expect(printableUrl("not a url secretpw")).not.toContain("secretpw");
  });

  test("`deliver()` counts a 2xx without a JSON outcome as `2xx`", async () => {
    const receiver = fakeReceiver(() => new Response("ok", { status: 204 }));
    const summary = await deliver(events.slice(0, 3), { url: URL, secret: SECRET, fetch: receiver.fetch });
    expect(summary.outcomes).toEqual({ "2xx": 3 });
    expect(summary.requests).toBe(3);
  });

  test("`deliver()` keeps file order without shuffle and repeats the same shuffled order for the same seed", async () => {
    const order = async (options: { shuffle?: boolean; seed?: number; copies?: number }): Promise<string[]> => {
      const receiver = fakeReceiver(() => processed());
      await deliver(events, { url: URL, secret: SECRET, fetch: receiver.fetch, ...options });
      return receiver.seen.map((s) => s.id);
    };
    const fileOrder = events.map((e) => idOf(e.body));
    expect(await order({})).toEqual(fileOrder);

    const a = await order({ shuffle: true, seed: 7, copies: 2 });
    const b = await order({ shuffle: true, seed: 7, copies: 2 });
    const c = await order({ shuffle: true, seed: 8, copies: 2 });
    expect(a).toHaveLength(24);
    expect(b).toEqual(a);
    expect(c).not.toEqual(a);
    expect([...a].sort()).toEqual([...fileOrder, ...fileOrder].sort());
  });
});

describe("deliver() --provider", () => {
  const cases = [
    { provider: "github", secret: "github-deliver-secret-0123456789", processed: 2, ignored: 2 },
    { provider: "shopify", secret: "shpss_deliver_secret_0123456789", processed: 2, ignored: 1 },
    { provider: "paddle", secret: "pdl_ntfset_01deliver_secret_0123456789", processed: 2, ignored: 2 },
    { provider: "adyen", secret: "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056", accepted: 3 },
  ] as const;
  for (const c of cases) {
    test(`\`deliver()\` signs ${c.provider} fixtures like ${c.provider} and a real app records them; a second round is all duplicates`, async () => {
      await fresh.db`truncate webhook_inbox, outbox restart identity`;
      const provider = providerNamed(c.provider)!;
      const app = createApp({
        db: fresh.db,
        endpoints: [{ name: "dev", provider, secrets: [c.secret], handlers: handlersFor(c.provider) ?? {}, isDefault: true }],
        log: () => {},
      });
      const files = readProviderFixtures([join(FIXTURES_DIR, c.provider)]);
      const options = {
        url: `http://receiver.test/webhooks/${c.provider}/dev`,
        secret: c.secret,
        provider: c.provider,
        concurrency: 4,
        fetch: (r: Request) => app.fetch(r),
      };
      const first = await deliver(files, options);
      const { provider: _p, secret: _s, ...expected } = c;
      expect(first.outcomes).toEqual(expected);
      const second = await deliver(files, options);
      expect(second.outcomes).toEqual(c.provider === "adyen" ? { accepted: 3 } : { duplicate: files.length });
      expect(await count(fresh.db, "outbox")).toBe(c.provider === "adyen" ? 3 : 2);
    });
  }
});
