import type { FakeStripeStore, StoredObject } from "../fake-stripe/store.ts";
import type { Storm, StormEvent } from "./model.ts";

/** Where Stripe serves each object type the storm's events carry (its related_object.url). */
const PATHS: Readonly<Record<string, string>> = {
  invoice: "invoices",
  invoice_payment: "invoice_payments",
  charge: "charges",
  refund: "refunds",
  dispute: "disputes",
};

/**
 * The same storm as thin event notifications (what an Event Destination sends): each classic event
 * becomes `v1.<type>` with a `related_object` pointing at its object and `snapshot_event` naming it, under
 * the same id (the inbox key's provider, `stripe-thin`, keeps it apart from a classic row). Stripe's current
 * state of every object, the copy in its last event of the storm, is put in `store` for the worker to
 * fetch: the model's end state does not change, since handlers move states forward only.
 */
export function thinStorm(storm: Storm, store: FakeStripeStore): Storm {
  const objectOf = (event: StormEvent) => {
    const classic = JSON.parse(event.body) as { created: number; data: { object: { id: string; object: string } } };
    return {
      created: classic.created,
      object: classic.data.object,
      path: PATHS[classic.data.object.object] ?? `${classic.data.object.object}s`,
    };
  };
  // In creation order, so each object ends with the copy of its last event.
  for (const event of [...storm.events].sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0))) {
    const { created, object, path } = objectOf(event);
    store.put(path, { ...object, created } as StoredObject);
  }
  const events: StormEvent[] = storm.events.map((event) => {
    const { created, object, path } = objectOf(event);
    const classic = { created };
    const body = JSON.stringify(
      {
        id: event.id,
        object: "v2.core.event",
        type: `v1.${event.type}`,
        created: new Date(classic.created * 1000).toISOString(),
        livemode: false,
        related_object: { id: object.id, type: object.object, url: `/v1/${path}/${object.id}` },
        snapshot_event: event.id,
      },
      null,
      2,
    );
    return { ...event, type: `v1.${event.type}`, body };
  });
  return { ...storm, events };
}
