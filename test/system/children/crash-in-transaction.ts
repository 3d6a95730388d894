// Child for the receiveSync crash: its invoice.paid handler runs the non-idempotent receipt handler,
// prints `IN_TX <backend pid>` while the inbox transaction is still open (rows inserted, not
// committed), and hangs until the parent SIGKILLs it.
import { receiveSync } from "../../../src/receiver/receive.ts";
import { receiptHandlers, requireHandler } from "../broken-receivers.ts";
import { childInput, hangUntilKilled, report } from "./child-runtime.ts";

const receipt = requireHandler(receiptHandlers, "invoice.paid");
const { db, event } = await childInput();
await receiveSync(
  db,
  {
    provider: "stripe",
    endpoint: "billing",
    handlers: {
      "invoice.paid": async (tx, object, context) => {
        await receipt(tx, object, context);
        const [row] = await tx`select pg_backend_pid() as pid`;
        report(`IN_TX ${String(row?.pid)}`);
        await hangUntilKilled();
      },
    },
  },
  event,
);
report("UNREACHABLE: the transaction committed");
