import type { Tx } from "../db/db.ts";
import { handlerTable, PermanentError, type HandlerContext } from "./handler-table.ts";
import { insertOutbox } from "./insert-outbox.ts";

/**
 * Adyen `AUTHORISATION` (Adyen docs, "Webhook types", AUTHORISATION): a successful one (`success`
 * `"true"`) books the payment as one `AdyenPaymentAuthorised` outbox message `{ psp_reference,
 * merchant_account, merchant_reference, amount, currency, event_id }` keyed by its pspReference; a
 * refused one (`"false"`) books nothing. `amount.value` is in minor units. Once per payment: its inbox
 * key is `<pspReference>:AUTHORISATION:true`, signed and the same on every retry, and a second row for
 * it writes nothing ({@link insertOutbox}). Runs inside the inbox transaction.
 * @throws PermanentError when a successful item has no merchantAccountCode or integer amount.
 */
export async function bookAuthorisation(tx: Tx, item: Record<string, unknown>, context: HandlerContext): Promise<void> {
  if (item.success !== "true") return;
  const { pspReference: psp, merchantAccountCode: account, merchantReference: reference } = item;
  const amount = item.amount as { value?: unknown; currency?: unknown } | undefined;
  if (
    typeof psp !== "string" ||
    typeof account !== "string" ||
    !Number.isSafeInteger(amount?.value) ||
    typeof amount?.currency !== "string"
  )
    throw new PermanentError(
      "Cannot book Adyen authorisation: pspReference, merchantAccountCode and amount (value in minor units, currency) are required",
    );
  const payload = {
    psp_reference: psp,
    merchant_account: account,
    merchant_reference: typeof reference === "string" ? reference : null,
    amount: amount.value as number,
    currency: amount.currency,
    event_id: context.eventId,
  };
  await insertOutbox(tx, { account: "", aggregate: ["AdyenPayment", psp], eventType: "AdyenPaymentAuthorised", messageKey: "" }, payload);
}

/** The Adyen example handler table: `AUTHORISATION` (see {@link bookAuthorisation}); other event codes are recorded `ignored`. */
export const adyenHandlers = handlerTable({ AUTHORISATION: bookAuthorisation });
