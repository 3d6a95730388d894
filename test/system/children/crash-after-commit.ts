// Child for Case B: the broken receiveApplyFirst commits the business change, prints COMMITTED, and
// hangs before writing the inbox row, until the parent SIGKILLs it (a deploy, an OOM kill).
import { receiveApplyFirst, receiptHandlers } from "../broken-receivers.ts";
import { childInput, hangUntilKilled, report } from "./child-runtime.ts";

const { db, event } = await childInput();
await receiveApplyFirst(db, { provider: "stripe", endpoint: "billing", handlers: receiptHandlers }, event, {
  afterCommit: async () => {
    report("COMMITTED");
    await hangUntilKilled();
  },
});
report("UNREACHABLE: the inbox row was written");
