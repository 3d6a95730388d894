// The delivery contract every provider passes end to end: its fixtures, signed as its sender signs them
// (src/dev/provider-delivery.ts), posted to createApp as several receivers at once (one connection
// each), duplicated, shuffled and split across secrets of a rotation, in every mode (sync, async with
// the worker, hybrid); the inbox and the business rows end the same, a redelivery changes nothing, and
// bad input is refused with its reason code and writes nothing. A provider is done when its test file
// calls providerContractSuite and providerDeliverySuite and both are green.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { signDelivery, type DeliveryProvider, type ProviderFixture } from "../../src/dev/provider-delivery.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import type { ErrorCode } from "../../src/errors.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import type { WebhookProvider } from "../../src/providers/provider.ts";
import { createApp, type App } from "../../src/receiver/app.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import { closeAll, connections, freshDatabase } from "../support/helpers.ts";
import { workOff } from "../support/work.ts";

/** A signed request as the suite posts it. */
export interface SignedDelivery {
  headers: Record<string, string>;
  body: string;
}

/** What {@link providerDeliverySuite} checks one provider with. */
export interface ProviderDeliveryContract {
  provider: WebhookProvider;
  /** How its sender signs (src/dev/provider-delivery.ts). */
  signer: DeliveryProvider;
  handlers: HandlerTable;
  /** Two secrets of a rotation: deliveries alternate between them. */
  secrets: readonly [string, string];
  fixtures: readonly ProviderFixture[];
  /** Every event the fixtures hold: inbox event id → its final outcome. */
  inbox: Record<string, "processed" | "ignored">;
  /** The business rows, comparable across modes (no timestamps, no generated ids). */
  endState(db: Db): Promise<unknown>;
  expected: unknown;
  /** The exact body of every 2xx answer when the provider prescribes one (Adyen: `[accepted]`). */
  acceptedBody?: string;
  /** Bad deliveries made from a validly signed one: each must be answered 400 with `code`, writing nothing. */
  bad(signed: SignedDelivery): { why: string; delivery: SignedDelivery; code: ErrorCode }[];
  /**
   * The header the inbox `event_id` comes from when the signature does not cover it (GitHub's
   * `x-github-delivery`, Shopify's `x-shopify-event-id`): every fixture resent under a fresh value is a
   * new inbox row, and must change no business row.
   */
  unsignedIdHeader?: string;
}

const ENDPOINT = "contract";
/** Receivers delivering at once, each on its own connection, like replicas behind a load balancer. */
const ACTORS = 4;
const COPIES = 3;
const MODES: readonly Mode[] = ["sync", "async", "hybrid"];

/** Registers the delivery contract of one provider, on a database of its own. */
export function providerDeliverySuite(contract: ProviderDeliveryContract): void {
  describe(`provider delivery contract: ${contract.provider.name}`, () => {
    let fresh: Awaited<ReturnType<typeof freshDatabase>>;
    beforeAll(async () => {
      fresh = await freshDatabase();
    });
    afterAll(() => fresh?.drop());
    beforeEach(async () => {
      await fresh.db`truncate webhook_inbox, outbox restart identity`;
    });

    const url = `http://receiver.test/webhooks/${contract.provider.name}/${ENDPOINT}`;
    const apps = (dbs: Db[], mode: Mode): App[] =>
      dbs.map((db) =>
        createApp({
          db,
          endpoints: [{ name: ENDPOINT, provider: contract.provider, secrets: contract.secrets, handlers: contract.handlers, mode }],
          log: () => {},
          maxInFlight: 1,
          queueTimeoutMs: 10_000,
        }),
      );
    const post = async (app: App, delivery: SignedDelivery) => {
      const res = await app.fetch(new Request(url, { method: "POST", headers: delivery.headers, body: delivery.body }));
      return { status: res.status, text: await res.text() };
    };

    /** Every fixture COPIES times, shuffled by `seed`, posted by ACTORS receivers at once; returns the answers. */
    async function deliverAll(targets: App[], seed: number): Promise<{ status: number; text: string }[]> {
      const queue = contract.fixtures.flatMap((f) => Array.from({ length: COPIES }, () => f));
      shuffleInPlace(queue, mulberry32(seed));
      const answers: { status: number; text: string }[] = [];
      const now = Math.floor(Date.now() / 1000);
      let next = 0;
      await Promise.all(
        targets.map(async (app) => {
          while (next < queue.length) {
            const i = next++;
            const signed = await signDelivery(contract.signer, queue[i] as ProviderFixture, contract.secrets[i % 2] as string, now);
            answers.push(await post(app, signed));
          }
        }),
      );
      return answers;
    }

    const inboxState = async () =>
      Object.fromEntries(
        (await fresh.db<{ event_id: string; outcome: string | null }[]>`select event_id, outcome from webhook_inbox order by event_id`).map(
          (r) => [r.event_id, r.outcome],
        ),
      );

    for (const [m, mode] of MODES.entries()) {
      test(`${mode}: every fixture ×${COPIES}, shuffled, from ${ACTORS} receivers at once, across two secrets, ends in the expected state; a redelivery changes nothing`, async () => {
        const dbs = connections(fresh.url, ACTORS);
        try {
          const targets = apps(dbs, mode);
          const answers = await deliverAll(targets, 1_000 + m);
          expect(answers.filter((a) => a.status !== 200)).toEqual([]);
          if (contract.acceptedBody !== undefined) expect(new Set(answers.map((a) => a.text))).toEqual(new Set([contract.acceptedBody]));
          if (mode !== "sync")
            await workOff(fresh.db, contract.handlers, { tables: { [contract.provider.name]: contract.handlers }, limit: 1_000 });
          expect(await inboxState()).toEqual(contract.inbox);
          expect(await contract.endState(fresh.db)).toEqual(contract.expected);
          const again = await deliverAll(targets, 2_000 + m);
          expect(again.filter((a) => a.status !== 200)).toEqual([]);
          if (contract.acceptedBody === undefined)
            expect(new Set(again.map((a) => (JSON.parse(a.text) as { outcome: string }).outcome))).toEqual(new Set(["duplicate"]));
          if (mode !== "sync")
            expect(await workOff(fresh.db, contract.handlers, { tables: { [contract.provider.name]: contract.handlers } })).toEqual([]);
          expect(await inboxState()).toEqual(contract.inbox);
          expect(await contract.endState(fresh.db)).toEqual(contract.expected);
        } finally {
          await closeAll(dbs);
        }
      }, 60_000);
    }

    const header = contract.unsignedIdHeader;
    if (header !== undefined)
      test(`every fixture resent under a fresh ${header} (not signed) is a new inbox row and changes no business row, in every mode`, async () => {
        const [app] = apps([fresh.db], "sync");
        const deliverOnce = async (target: App, freshId: boolean) => {
          const answers: string[] = [];
          for (const f of contract.fixtures) {
            const signed = await signDelivery(contract.signer, f, contract.secrets[0], Math.floor(Date.now() / 1000));
            const kept = Object.entries(signed.headers).filter(([k]) => k.toLowerCase() !== header);
            const headers = freshId ? { ...Object.fromEntries(kept), [header]: crypto.randomUUID() } : signed.headers;
            const res = await post(target, { headers, body: signed.body });
            answers.push(res.status === 200 ? (JSON.parse(res.text) as { outcome: string }).outcome : `HTTP ${res.status}`);
          }
          return answers;
        };
        const work = () => workOff(fresh.db, contract.handlers, { tables: { [contract.provider.name]: contract.handlers }, limit: 1_000 });
        await deliverOnce(app as App, false);
        expect(await contract.endState(fresh.db)).toEqual(contract.expected);
        for (const mode of MODES) {
          const [target] = apps([fresh.db], mode);
          const replays = await deliverOnce(target as App, true);
          expect(replays.filter((o) => !["processed", "ignored", "queued"].includes(o))).toEqual([]);
          if (mode !== "sync") await work();
          expect(await contract.endState(fresh.db)).toEqual(contract.expected);
        }
        const [rows] = await fresh.db<{ n: number }[]>`select count(*)::int as n from webhook_inbox`;
        expect(rows?.n).toBe(Object.keys(contract.inbox).length * (1 + MODES.length));
      });

    test("bad input is answered 400 with its reason code and writes nothing, in every mode", async () => {
      const fixture = contract.fixtures[0] as ProviderFixture;
      const signed = await signDelivery(contract.signer, fixture, contract.secrets[0], Math.floor(Date.now() / 1000));
      const cases = contract.bad(signed);
      expect(cases.length).toBeGreaterThan(0);
      for (const mode of MODES) {
        const [app] = apps([fresh.db], mode);
        for (const c of cases) {
          const res = await post(app as App, c.delivery);
          expect({ why: c.why, status: res.status, error: (JSON.parse(res.text) as { error?: string }).error }).toEqual({
            why: c.why,
            status: 400,
            error: c.code,
          });
        }
      }
      const [counts] =
        await fresh.db`select (select count(*)::int from webhook_inbox) as inbox, (select count(*)::int from outbox) as outbox`;
      expect(counts).toEqual({ inbox: 0, outbox: 0 });
    });
  });
}

/** The outbox rows, comparable across modes: aggregate, type and payload, in a stable order. */
export async function outboxRows(db: Db): Promise<unknown[]> {
  return [
    ...(await db`select aggregate_type, aggregate_id, event_type, payload from outbox order by aggregate_id, event_type, message_key`),
  ];
}
