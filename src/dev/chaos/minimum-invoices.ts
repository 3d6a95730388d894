/**
 * The fewest invoice lifecycles `bun run chaos` accepts at `ratePerSec` (`--rate`: the senders start
 * that many events per second) when its faults include one due at a time into the storm: PostgreSQL's
 * restart (due 1 s in), the failover to its standby (due 1.5 s in) or the receivers' outage (due at a third of events × 2 ÷ rate, so at two thirds
 * of the sending time). Either happens only while the storm is still being sent, so the storm must take
 * at least 2 s to send (events ÷ rate: the fault loop wakes when one falls due, and a kill in its way
 * takes at most ~0.6 s). Counted at 6 events per invoice, a little under the model's mean (~6.5 with
 * refunds and disputes), so a storm of this size sends for about 2 s or more. Returns a whole number ≥ 1.
 */
export function minimumInvoices(ratePerSec: number): number {
  const sendingSec = 2;
  const eventsPerInvoice = 6;
  return Math.max(1, Math.ceil((sendingSec * ratePerSec) / eventsPerInvoice));
}
