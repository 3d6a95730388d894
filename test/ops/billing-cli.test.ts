// The real `bun run billing` (src/bin/billing.ts) as a subprocess against this file's database.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { receiveSync } from "../../src/receiver/receive.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { freshDatabase, verified } from "../support/helpers.ts";
import { moneyOut } from "../support/money-out.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());

const REPO = join(import.meta.dir, "..", "..");
const WAITS = 60_000;

async function billing(args: string[]): Promise<{ code: number | null; signal: string | number | null; stdout: string; stderr: string }> {
  const proc = Bun.spawn([process.execPath, "src/bin/billing.ts", ...args], {
    cwd: REPO,
    env: { ...process.env, DATABASE_URL: fresh.url },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 20_000, // a bound on a hung run, not a speed assertion
  });
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code: proc.exitCode, signal: proc.signalCode, stdout, stderr };
}

/** The invoice ids printed in the invoices table, in order. */
const invoiceIds = (stdout: string): string[] => [...stdout.matchAll(/│ (in_bill_\d+) /g)].map((m) => m[1] ?? "");

describe("billing CLI", () => {
  test(
    "`billing` prints the 20 newest invoices by default and says how many more there are; --limit and --all change that",
    async () => {
      // 25 invoices, in_bill_01 oldest; the 20 newest are 06…25.
      for (let i = 1; i <= 25; i++) {
        const id = `in_bill_${String(i).padStart(2, "0")}`;
        await db`
        insert into invoices (id, customer_id, status, currency, amount_due, created_at)
        values (${id}, 'cus_bill', 'open', 'usd', 100, now() - ${26 - i} * interval '1 minute')
      `;
      }
      const all = Array.from({ length: 25 }, (_, i) => `in_bill_${String(i + 1).padStart(2, "0")}`);

      const byDefault = await billing([]);
      expect({ code: byDefault.code, stderr: byDefault.stderr }).toEqual({ code: 0, stderr: "" });
      expect(invoiceIds(byDefault.stdout)).toEqual(all.slice(5));
      expect(byDefault.stdout).toContain("… 5 more (older) not shown: --limit N or --all");

      const three = await billing(["--limit", "3"]);
      expect(invoiceIds(three.stdout)).toEqual(all.slice(22));
      expect(three.stdout).toContain("… 22 more (older) not shown");

      const every = await billing(["--all"]);
      expect(invoiceIds(every.stdout)).toEqual(all);
      expect(every.stdout).not.toContain("more (older)");
    },
    WAITS,
  );

  test(
    "`billing --help` prints the usage and exits 0; unknown options, arguments and bad limits exit 2",
    async () => {
      const help = await billing(["--help"]);
      expect({ code: help.code, stderr: help.stderr }).toEqual({ code: 0, stderr: "" });
      expect(help.stdout).toStartWith("Usage: bun run billing");
      expect(help.stdout).not.toContain("invoices\n");
      for (const args of [["--bogus"], ["extra"], ["--limit", "0"], ["--limit", "abc"], ["--limit", "2", "--all"]]) {
        const run = await billing(args);
        expect({ args, code: run.code, stdout: run.stdout }).toEqual({ args, code: 2, stdout: "" });
        expect(run.stderr).toContain("Usage: bun run billing");
      }
    },
    WAITS,
  );

  test(
    "`billing` shows each ledger row's kind, settlement and balance transaction, and net amounts per invoice",
    async () => {
      await db`truncate invoices, ledger_entries, outbox, webhook_inbox cascade`;
      for (const event of moneyOut())
        await receiveSync(db, { provider: "stripe", endpoint: "billing", handlers: stripeHandlers }, verified(event.body));
      const run = await billing(["--all"]);
      expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
      const cells = (line: string) =>
        line
          .split("│")
          .map((c) => c.trim())
          .filter((c) => c !== "");
      const lines = run.stdout.split("\n").map(cells);
      const net = run.stdout.slice(run.stdout.indexOf("net per invoice"), run.stdout.indexOf("\noutbox"));
      expect(
        net
          .split("\n")
          .map(cells)
          .filter((c) => c[1]?.startsWith("in_1Sm")),
      ).toEqual([
        ["0", "in_1SmA1pLgUG5tbmjcRfA0xRef", "usd", "10000", "4000", "0", "0", "0", "0", "0", "6000"],
        ["1", "in_1SmA2qLgUG5tbmjcRfB0xDsp", "usd", "20000", "0", "0", "20000", "1500", "0", "20000", "18500"],
      ]);
      expect(lines.filter((c) => c[2] === "dispute_fee")).toEqual([
        [
          "5",
          "in_1SmA2qLgUG5tbmjcRfB0xDsp",
          "dispute_fee",
          "1500",
          "usd",
          "1500",
          "usd",
          "txn_1SmA2qLgUG5tbmjc0DspW",
          "dp_1SmA2qLgUG5tbmjc0DspB",
          "evt_1SmB6aLgUG5tbmjc0dpcrea",
        ],
      ]);
    },
    WAITS,
  );

  test(
    "`billing` leads each table with the account once a connected account's rows exist: one invoice id under two accounts reads as two invoices",
    async () => {
      await db`truncate invoices, ledger_entries, outbox, webhook_inbox cascade`;
      for (const account of ["", "acct_1Bill"]) {
        await db`insert into invoices (account, id, customer_id, status, currency, amount_due, amount_paid) values (${account}, 'in_bill_same', 'cus_b', 'paid', 'usd', 500, 500)`;
      }
      const run = await billing([]);
      expect(run.code).toBe(0);
      const invoicesTable = run.stdout.slice(0, run.stdout.indexOf("ledger_entries"));
      expect(invoicesTable).toMatch(/│ +│ account +│ id +│/);
      expect(invoicesTable).toMatch(/│ acct_1Bill +│ in_bill_same +│/);
      await db`truncate invoices cascade`;
      const platformOnly = await billing([]);
      expect(platformOnly.stdout).not.toMatch(/│ account +│/);
    },
    WAITS,
  );
});
