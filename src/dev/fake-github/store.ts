// The fake GitHub API's in-memory state: each hook's deliveries (newest last, as they happened), the
// redeliveries asked for, every request answered, and the token requests must carry. Tests fill it;
// the fake's fetch app (app.ts) reads it.

/**
 * One webhook delivery as GitHub's REST API lists it (GitHub docs, "REST API endpoints for repository
 * webhooks", "List deliveries for a repository webhook": the `hook-delivery-item` shape). `guid` is the
 * `X-GitHub-Delivery` header of the request, kept on a redelivery; `id` is this attempt's own number;
 * `delivered_at` an ISO 8601 time; `status_code` what the receiver answered (0 when it could not be
 * reached); `status` GitHub's description of it (`OK`, `Invalid HTTP Response: 503`, `timed out`).
 */
export interface FakeDelivery {
  id: number;
  guid: string;
  delivered_at: string;
  redelivery: boolean;
  /** Seconds. */
  duration: number;
  status: string;
  status_code: number;
  event: string;
  action: string | null;
  installation_id: number | null;
  repository_id: number | null;
  throttled_at: string | null;
}

/** One request the fake answered (for tests that check the paging and that no redelivery was asked for). */
export interface SeenGitHubRequest {
  method: string;
  /** Path and query, e.g. `/repos/acme/shop/hooks/1/deliveries?per_page=100&cursor=…`. */
  path: string;
  status: number;
}

/**
 * The fake's state. `hooks` maps a hook's path (`repos/<owner>/<repo>/hooks/<id>`,
 * `orgs/<org>/hooks/<id>` or `app/hook`) to its deliveries, oldest first; the API lists them newest
 * first. A redelivery (`POST …/deliveries/<id>/attempts`) is recorded in `redelivered` and, when
 * `redeliver` is set, performed by it (a test posts the delivery to the receiver), its answer becoming
 * a new delivery of the same guid with `redelivery: true`.
 */
export class FakeGitHubStore {
  readonly hooks = new Map<string, FakeDelivery[]>();
  /** Delivery ids a redelivery was asked for, in order. */
  readonly redelivered: number[] = [];
  readonly requests: SeenGitHubRequest[] = [];
  /** Performs a redelivery of `delivery` and returns the receiver's HTTP status (0: unreachable); unset: nothing is sent and no attempt is added. */
  redeliver: ((hook: string, delivery: FakeDelivery) => Promise<number>) | undefined;
  private nextId = 1_000;

  /** @param token what every request must carry as `Authorization: Bearer …` (undefined accepts any). */
  constructor(readonly token?: string) {}

  /** Adds a delivery to `hook` (its id assigned when not given) and returns it. */
  add(hook: string, delivery: Partial<FakeDelivery> & Pick<FakeDelivery, "guid" | "delivered_at" | "status_code">): FakeDelivery {
    const full: FakeDelivery = {
      id: delivery.id ?? ++this.nextId,
      redelivery: false,
      duration: 0.1,
      status: delivery.status_code >= 200 && delivery.status_code < 300 ? "OK" : `Invalid HTTP Response: ${delivery.status_code}`,
      event: "push",
      action: null,
      installation_id: null,
      repository_id: 1,
      throttled_at: null,
      ...delivery,
    };
    const list = this.hooks.get(hook) ?? [];
    list.push(full);
    this.hooks.set(hook, list);
    return full;
  }
}
