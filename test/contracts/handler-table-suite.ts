// The contract every handler table passes (stripe-node's createCryptoProviderTestSuite, for handlers):
// each fixture event, signed and verified through its provider, runs through every processing mode
// (sync, hybrid, the worker's concurrent slots, replay) against a real database; every mode ends in
// the expected state, a redelivery changes no row, and any order of the lifecycle, with duplicates,
// ends in the same state (fast-check). A handler table is done when it passes; registering another
// fixture set is one more call of handlerTableSuite().
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Db } from "../../src/db/db.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { inboxRow, insertInbox, type InboxKey } from "../../src/inbox/inbox.ts";
import { replayEvent } from "../../src/ops/replay.ts";
import type { VerifiedEvent, WebhookProvider } from "../../src/providers/provider.ts";
import { receiveAsync, receiveHybrid, receiveSync, type Outcome, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { claimBatch, type Claim } from "../../src/worker/claim.ts";
import { processClaim, type ProcessOptions } from "../../src/worker/process-claim.ts";
import { snapshotTables as snapshot, userTables } from "../../src/testing/table-snapshot.ts";
import { freshDatabase } from "../support/helpers.ts";

/** What {@link handlerTableSuite} checks one fixture set with. */
export interface HandlerTableContract {
  /** Names the describe block, e.g. "billing: invoice lifecycle". */
  name: string;
  handlers: HandlerTable;
  provider: WebhookProvider;
  /** Signs `body` as the provider would: the request headers that `provider.verify` accepts with `secret` at `timestampSec`. */
  sign(body: string, secret: string, timestampSec: number): Promise<Record<string, string>>;
  /** The fixture events: exact request bodies, in the order the provider would create them. */
  events: readonly { name: string; body: string }[];
  /**
   * Reads the business rows into a comparable value: no timestamps, no generated ids, nothing that
   * depends on which of two events carrying one fact came first (e.g. the booking event's id).
   */
  endState(db: Db): Promise<unknown>;
  /** The value {@link endState} must return after the whole lifecycle, in any mode and any order. */
  expected: unknown;
}

/** The processing modes every handler table runs in. */
export const MODES = ["sync", "hybrid", "worker", "replay"] as const;
export type ContractMode = (typeof MODES)[number];

const SECRET = "whsec_contract_0123456789abcdefghij";
const ENDPOINT = "contract";
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
/** Bound per processing call in the suite: generous, the lifecycle is tiny; a bound, not a speed goal. */
const TIMEOUT_MS = 10_000;
/** Property runs per fixture set, each on an emptied database. */
const PROPERTY_RUNS = 25;

/** Registers the contract tests of one handler table and fixture set, on a database of its own. */
export function handlerTableSuite(contract: HandlerTableContract): void {
  describe(`handler table contract: ${contract.name}`, () => {
    let fresh: Awaited<ReturnType<typeof freshDatabase>>;
    let events: VerifiedEvent[];
    const target: ReceiveTarget = { provider: contract.provider.name, endpoint: ENDPOINT, handlers: contract.handlers };
    const modeRun = (db: Db) => new ModeRunner(db, target);

    beforeAll(async () => {
      fresh = await freshDatabase();
      events = await Promise.all(contract.events.map((e) => verify(contract, e.body)));
    });
    afterAll(() => fresh?.drop());
    beforeEach(() => emptyTables(fresh.db));

    for (const mode of MODES) {
      test(`${mode}: the lifecycle in order ends in the expected state, and a redelivery of every event changes no row`, async () => {
        const run = modeRun(fresh.db);
        await run.apply(mode, events);
        expect(await contract.endState(fresh.db)).toEqual(contract.expected);
        const before = await snapshot(fresh.db);
        const again = await run.redeliver(mode, events);
        expect(again.filter((o) => o !== "duplicate" && o !== "skipped")).toEqual([]);
        expect(await snapshot(fresh.db)).toEqual(before);
      }, 30_000);
    }

    test("replay of every settled event changes no row (handlers are idempotent)", async () => {
      await modeRun(fresh.db).apply("sync", events);
      const before = await snapshot(fresh.db);
      for (const e of events) await replayEvent(fresh.db, keyOf(target, e), contract.handlers);
      expect(await snapshot(fresh.db)).toEqual(before);
    }, 30_000);

    test(`any order of the lifecycle, with duplicates, in any mode ends in the expected state (${PROPERTY_RUNS} runs)`, async () => {
      const indices = events.map((_, i) => i);
      const scenario = fc.record({
        mode: fc.constantFrom(...MODES),
        order: fc.array(fc.nat({ max: indices.length - 1 }), { maxLength: 4 }).chain((extra) => {
          const all = [...indices, ...extra];
          return fc.shuffledSubarray(all, { minLength: all.length, maxLength: all.length });
        }),
      });
      await fc.assert(
        fc.asyncProperty(scenario, async ({ mode, order }) => {
          await emptyTables(fresh.db);
          await modeRun(fresh.db).apply(
            mode,
            order.map((i) => events[i] as VerifiedEvent),
          );
          expect(await contract.endState(fresh.db)).toEqual(contract.expected);
        }),
        { numRuns: PROPERTY_RUNS },
      );
    }, 60_000);
  });
}

/**
 * Registers a test that every event type of `handlers` occurs in at least one of the fixture sets
 * run through {@link handlerTableSuite}, so no handler escapes the contract (pass every set the
 * table's test file registers).
 */
export function everyHandlerRunTest(name: string, handlers: HandlerTable, sets: readonly (readonly { body: string }[])[]): void {
  test(`handler table contract: every handler of ${name} runs in a fixture set`, () => {
    const types = new Set(sets.flat().map((e) => (JSON.parse(e.body) as { type?: unknown }).type));
    expect(
      Object.keys(handlers)
        .filter((type) => !types.has(type))
        .sort(),
    ).toEqual([]);
  });
}

/** Signs and verifies a fixture body through the contract's provider, as the receiver would. */
async function verify(contract: HandlerTableContract, body: string): Promise<VerifiedEvent> {
  const nowMs = Date.now();
  const headers = new Headers(await contract.sign(body, SECRET, Math.floor(nowMs / 1000)));
  return contract.provider.verify({ body, headers, secrets: [SECRET], toleranceSec: 300, nowMs });
}

function keyOf(target: ReceiveTarget, event: VerifiedEvent): InboxKey {
  return { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
}

/** Runs events through one processing mode, as production code does, and remembers the worker's claims. */
class ModeRunner {
  private claims: Claim[] = [];
  private readonly options: ProcessOptions;

  constructor(
    private readonly db: Db,
    private readonly target: ReceiveTarget,
  ) {
    this.options = { tables: { [target.provider]: target.handlers }, timeoutMs: TIMEOUT_MS, maxAttempts: 10, backoff: BACKOFF };
  }

  /** Delivers `events` in order through `mode`; worker modes then process every claimed row. */
  async apply(mode: ContractMode, events: readonly VerifiedEvent[]): Promise<void> {
    if (mode === "replay") return this.replayAll(events);
    const outcomes = await this.deliver(mode, events);
    expect(outcomes.filter((o) => o === "needs_review")).toEqual([]);
    if (mode === "worker") await this.work();
  }

  /** Delivers `events` again after {@link apply}; worker modes also run their old claims again (a late worker). */
  async redeliver(mode: ContractMode, events: readonly VerifiedEvent[]): Promise<string[]> {
    if (mode === "replay") {
      const results = await Promise.all(events.map((e) => insertInbox(this.db, [inboxRow(keyOf(this.target, e), e, "ignored")])));
      return results.map((inserted) => (inserted.size === 1 ? "recorded" : "duplicate"));
    }
    const outcomes: string[] = await this.deliver(mode, events);
    if (mode === "worker") for (const claim of this.claims) outcomes.push((await processClaim(this.db, claim, this.options)).outcome);
    return outcomes;
  }

  private async deliver(mode: Exclude<ContractMode, "replay">, events: readonly VerifiedEvent[]): Promise<Outcome[]> {
    const outcomes: Outcome[] = [];
    for (const event of events) {
      if (mode === "sync") outcomes.push(await receiveSync(this.db, this.target, event));
      else if (mode === "hybrid")
        outcomes.push(
          await receiveHybrid(this.db, this.target, event, { budgetMs: TIMEOUT_MS, backoff: BACKOFF }, (err) => {
            throw err;
          }),
        );
      else outcomes.push(await receiveAsync(this.db, this.target, event));
    }
    return outcomes;
  }

  /** Claims every queued row and processes them all at once, as concurrent worker slots do; every row must settle. */
  private async work(): Promise<void> {
    this.claims = await claimBatch(this.db, { limit: 1_000, leaseMs: 60_000, maxAttempts: 10 });
    const outcomes = await Promise.all(this.claims.map(async (c) => (await processClaim(this.db, c, this.options)).outcome));
    expect(outcomes.filter((o) => o !== "processed" && o !== "ignored")).toEqual([]);
  }

  /** Records each event as it would have been before its handler existed (`ignored`), then replays it: an operator's replay applies it. */
  private async replayAll(events: readonly VerifiedEvent[]): Promise<void> {
    for (const event of events) {
      const key = keyOf(this.target, event);
      if ((await insertInbox(this.db, [inboxRow(key, event, "ignored")])).size === 1) await replayEvent(this.db, key, this.target.handlers);
    }
  }
}

/** Every table but the migration log, emptied (the property's "fresh database" between runs). */
async function emptyTables(db: Db): Promise<void> {
  const tables = await userTables(db);
  await db.unsafe(`truncate ${tables.map((t) => `"${t}"`).join(", ")} restart identity cascade`);
}
