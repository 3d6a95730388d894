// The fake Stripe API's in-memory state: objects per resource in creation order, which events failed
// delivery, and faults to inject. Tests and chaos fill it; the fake's fetch app (app.ts) reads it.

/** A Stripe API object as stored: at least `id`, `object` and `created` (Unix seconds). */
export interface StoredObject {
  id: string;
  object: string;
  created: number;
  [field: string]: unknown;
}

/** One request the fake answered (for tests that check how the client paged). */
export interface SeenRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  status: number;
  /** The account the request was made for: its `Stripe-Account` (or `Stripe-Context`) header, `""` without one (the platform). */
  account: string;
}

/** An injected failure: the next `count` requests (matching `path` when given) get `status`. */
export interface Fault {
  status: number;
  count: number;
  path?: RegExp;
}

/**
 * The fake's state. `objects` maps a list path segment (`events`, `invoices`, `charges`, `refunds`,
 * `disputes`, `invoice_payments`, …) to its objects in insertion order; the list order is newest
 * first by `created`, ties broken by later insertion first (how Stripe orders same-second objects).
 * The platform's objects are under the resource's name; a connected account's under
 * `<acct_…>/<resource>` ({@link FakeStripeStore.slot}): each method takes the account (`""`, the
 * default, is the platform), and an object put for an account adds that account to the platform's
 * `accounts` (what `GET /v1/accounts` lists).
 */
export class FakeStripeStore {
  readonly objects = new Map<string, StoredObject[]>();
  /** Event ids Stripe failed to deliver (what `delivery_success=false` lists). */
  readonly undelivered = new Set<string>();
  readonly faults: Fault[] = [];
  readonly requests: SeenRequest[] = [];
  /** Random 429s: this fraction of list/retrieve requests is refused (0 = off), from a seeded generator. */
  rateLimitFraction = 0;
  private seed = 1;
  /** Events older than this many seconds before `now()` are gone (Stripe keeps 30 days: 2592000); undefined keeps every event. */
  eventRetentionSec: number | undefined;
  /** The fake's clock, Unix ms (tests move it). */
  now: () => number = Date.now;

  /** @param apiKey the key every request must carry as `Authorization: Bearer …` (undefined accepts any). */
  constructor(readonly apiKey?: string) {}

  /** The key of `resource`'s objects of `account` in {@link objects}: the resource itself for the platform (`""`). */
  static slot(resource: string, account = ""): string {
    return account === "" ? resource : `${account}/${resource}`;
  }

  /** Adds (or replaces, keeping its position) an object under `resource` of `account` (default the platform), e.g. `put("invoices", invoice)`. */
  put(resource: string, object: StoredObject, account = ""): void {
    const slot = FakeStripeStore.slot(resource, account);
    const list = this.objects.get(slot) ?? [];
    const at = list.findIndex((o) => o.id === object.id);
    if (at >= 0) list[at] = object;
    else list.push(object);
    this.objects.set(slot, list);
    if (account !== "" && !this.get("accounts", account))
      this.put("accounts", { id: account, object: "account", created: Math.floor(this.now() / 1000) });
  }

  /** Adds an event of `account` (default the platform); `delivered: false` also lists it under `delivery_success=false`. */
  putEvent(event: StoredObject, delivered = true, account = ""): void {
    this.put("events", event, account);
    if (!delivered) this.undelivered.add(event.id);
  }

  /** Removes an object of `account` (a later retrieve is a 404 `resource_missing`). */
  remove(resource: string, id: string, account = ""): void {
    const slot = FakeStripeStore.slot(resource, account);
    const list = this.objects.get(slot) ?? [];
    this.objects.set(
      slot,
      list.filter((o) => o.id !== id),
    );
  }

  /** Whether the API still holds `object` (events past `eventRetentionSec` are gone). */
  holds(resource: string, object: StoredObject): boolean {
    return (
      resource !== "events" ||
      this.eventRetentionSec === undefined ||
      object.created >= Math.floor(this.now() / 1000) - this.eventRetentionSec
    );
  }

  /** The object with `id` under `resource` of `account` (default the platform), or undefined: never another account's. */
  get(resource: string, id: string, account = ""): StoredObject | undefined {
    return this.objects.get(FakeStripeStore.slot(resource, account))?.find((o) => o.id === id);
  }

  /** Makes the next `count` requests (to paths matching `path`, when given) fail with `status` (429, 500, …). */
  failNext(count: number, status = 429, path?: RegExp): void {
    this.faults.push({ status, count, path });
  }

  /** @internal The status to fail `path` with, consuming one injected fault, or undefined. */
  takeFault(path: string): number | undefined {
    for (const f of this.faults) {
      if (f.count > 0 && (!f.path || f.path.test(path))) {
        f.count--;
        return f.status;
      }
    }
    if (this.rateLimitFraction > 0) {
      this.seed = (this.seed * 1103515245 + 12345) & 0x7fffffff;
      if (this.seed / 0x7fffffff < this.rateLimitFraction) return 429;
    }
    return undefined;
  }
}
