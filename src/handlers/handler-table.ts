import { PermanentError } from "../errors.ts";
import type { Handler, HandlerTable } from "../inbox/apply-event.ts";

/** The handler contract, defined with the one function that runs handlers (inbox/apply-event.ts). */
export type { Handler, HandlerContext, HandlerTable } from "../inbox/apply-event.ts";

/** The sender's creation time of the event a handler applies, for keeping the newest of `*.updated` events. */
export { eventCreatedAt } from "./event-created.ts";

/** Handlers throw it for a failure no retry can fix; defined with the other shared errors. */
export { PermanentError };

/** A handler table that cannot be built as given (a programming error, found at start). */
export class HandlerTableError extends Error {
  override name = "HandlerTableError";
}

/**
 * Event types as providers name them: words of letters, digits and `_` joined by dots or slashes:
 * `invoice.paid`, `v1.invoice.paid`, `v2.core.health.…`, `issues.opened` (GitHub), `orders/paid`
 * (Shopify), `transaction.completed` (Paddle), `AUTHORISATION` (Adyen).
 */
const EVENT_TYPE = /^[A-Za-z0-9_]+(?:[./][A-Za-z0-9_]+)*$/;

/**
 * Builds one handler table from `parts` (each `{ "<event type>": handler }`) and checks it: every
 * key is an event type (words joined by dots or slashes), every value a plain handler taking at most
 * `(tx, object, context)`, and no event type is given twice across the parts (spreading objects
 * would let the later one win silently). The table is frozen.
 * @throws HandlerTableError naming the event type and what is wrong.
 */
export function handlerTable(...parts: Readonly<Record<string, Handler>>[]): HandlerTable {
  const table: Record<string, Handler> = {};
  for (const part of parts) {
    for (const [type, handler] of Object.entries(part)) {
      if (!EVENT_TYPE.test(type))
        throw new HandlerTableError(
          `Handler table: "${type}" is not an event type (words of letters, digits and _ joined by dots or slashes)`,
        );
      if (typeof handler !== "function")
        throw new HandlerTableError(`Handler table: the handler of "${type}" is not a function (${typeof handler})`);
      if (handler.length > 3)
        throw new HandlerTableError(
          `Handler table: the handler of "${type}" takes ${handler.length} parameters; a handler is (tx, object, context)`,
        );
      if (Object.hasOwn(table, type)) throw new HandlerTableError(`Handler table: "${type}" has two handlers; give each event type one`);
      table[type] = handler;
    }
  }
  return Object.freeze(table);
}
