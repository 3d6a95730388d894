import type Stripe from "stripe";
import type { Db, Tx } from "../db/db.ts";

/** A Stripe API object as listed (at least a string `id`). */
export type StripeObject = Record<string, unknown> & { id: string };

/**
 * One drifted object: its id, its drift class, whether the handlers can repair it by applying
 * Stripe's current object (a forward move or a missing booking; never a move back or a changed
 * amount), and what each side says (camelCase fields; a local field is null when absent).
 */
export interface ObjectDrift {
  id: string;
  drift: string;
  repairable: boolean;
  stripe: Record<string, unknown>;
  local: Record<string, unknown>;
}

/** stripe-node's request options for a read made as `account`: `stripeAccount` (header `Stripe-Account`), none for the platform (`""`). */
export function asAccount(account: string): Stripe.RequestOptions | undefined {
  return account === "" ? undefined : { stripeAccount: account };
}

/** The list parameters every reconciliation sends (Stripe API reference, "Pagination", `created`). */
export interface ListParams {
  limit: number;
  created: { gte: number };
  starting_after?: string;
}

/**
 * What one object reconciliation needs to know about its Stripe resource: how to list it, how to
 * compare a page with the local tables (one SQL query), and how a repair is recorded in the inbox.
 */
export interface ObjectKind {
  /** The command's name and the resource's plural: `invoices`, `refunds`, `disputes`. */
  name: string;
  /** The restricted-key permission the list needs, for the usage text (`Invoices: Read`). */
  permission: string;
  /**
   * One list page, newest first (stripe-node's `<resource>.list`), made as `account` (`Stripe-Account`,
   * stripe-node's `stripeAccount`) when it is a connected account's id, as the platform for `""`.
   */
  list(stripe: Stripe, params: ListParams, account: string): Promise<{ data: StripeObject[]; has_more: boolean }>;
  /**
   * The drifted objects of `objects` (in their order), Stripe's objects of `account` (`""`: the platform)
   * compared with that account's local rows only, in one query; on a transaction it sees that
   * transaction's writes.
   */
  findDrift(db: Db | Tx, objects: readonly StripeObject[], account: string): Promise<ObjectDrift[]>;
  /**
   * The inbox key and event type of a repair of `object`: a key deterministic in Stripe's state
   * (`reconcile:<id>:…`), and the type whose handler applies the object.
   */
  repairEvent(object: StripeObject): { key: string; type: string };
  /** `like` patterns of the event types whose needs-review rows about the object a repair that leaves no drift settles. */
  reviewTypes: readonly string[];
}
