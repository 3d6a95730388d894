// Which Stripe accounts a reconcile run reads: the platform's own, one connected account, or all of them.
import type Stripe from "stripe";
import { withStripeRetry, type StripeRetryOptions } from "../stripe-api/retry.ts";
import { UsageError } from "./reconcile-args.ts";

/** A connected account id as Stripe writes it (`acct_` and letters or digits). */
const ACCOUNT_ID = /^acct_[A-Za-z0-9]{1,250}$/;

/**
 * The accounts of a run, from `--account acct_…` and `--all-accounts`: `platform` (neither: the
 * platform's own, as before Connect), `one` (that connected account only), `all` (the platform and every
 * connected account {@link listConnectedAccounts} finds).
 */
export type AccountChoice = { kind: "platform" } | { kind: "one"; account: string } | { kind: "all" };

/**
 * Reads the two options into an {@link AccountChoice}.
 * @throws UsageError when both are given, or `--account` is not an `acct_…` id.
 */
export function readAccountChoice(account: string | undefined, all: boolean): AccountChoice {
  if (account !== undefined && all) throw new UsageError("--account and --all-accounts exclude each other: give one");
  if (account === undefined) return all ? { kind: "all" } : { kind: "platform" };
  if (!ACCOUNT_ID.test(account))
    throw new UsageError(`--account must be a connected account id (acct_…), got ${JSON.stringify(account.slice(0, 60))}`);
  return { kind: "one", account };
}

/**
 * The ids of every account connected to the platform (`GET /v1/accounts`, Stripe API reference "List
 * all connected accounts": empty when the key's account is not a platform), all pages (`limit=100`,
 * `starting_after` the last id), each page retried with {@link withStripeRetry}; in Stripe's order
 * (newest first). Made as the platform (no `Stripe-Account`).
 * @throws the stripe-node error of a final failure (a restricted key without Connect read: 403).
 */
export async function listConnectedAccounts(stripe: Stripe, retry: StripeRetryOptions = {}): Promise<string[]> {
  const ids: string[] = [];
  for (let after: string | undefined; ;) {
    const params: Stripe.AccountListParams = { limit: 100, ...(after ? { starting_after: after } : {}) };
    const page = await withStripeRetry(() => stripe.accounts.list(params), retry);
    ids.push(...page.data.map((a) => a.id));
    const last = page.data.at(-1);
    if (!page.has_more || !last) return ids;
    after = last.id;
  }
}

/**
 * The accounts a run reads, `""` standing for the platform: `[""]`, `[account]`, or `["", …every
 * connected account, sorted by id]` (listed once per run).
 * @throws as {@link listConnectedAccounts}.
 */
export async function accountsOf(choice: AccountChoice, stripe: Stripe, retry: StripeRetryOptions = {}): Promise<string[]> {
  if (choice.kind === "platform") return [""];
  if (choice.kind === "one") return [choice.account];
  return ["", ...(await listConnectedAccounts(stripe, retry)).sort()];
}

/** How an account is named in output: `platform` for `""`. */
export function accountLabel(account: string): string {
  return account === "" ? "platform" : account;
}
