// `isoDate()` reads the times providers send (Paddle's occurred_at, a thin event's created) as RFC 3339,
// and one written without an offset as UTC: the same instant in every process, whatever its time zone
// (review of fcab188, R13: it was read in the process's own zone).
import { expect, test } from "bun:test";
import { isoDate } from "../../src/providers/json-event.ts";

const CASES = {
  "2024-04-12T10:18:49.621022": "2024-04-12T10:18:49.621Z",
  "2024-04-12T10:18:49.621022Z": "2024-04-12T10:18:49.621Z",
  "2024-04-12T12:18:49.621+02:00": "2024-04-12T10:18:49.621Z",
  "2024-04-12 10:18:49": "2024-04-12T10:18:49.000Z",
  "2024-04-12T10:18:49.1Z": "2024-04-12T10:18:49.100Z",
};

test("`isoDate()` reads an offset-less time as UTC and an offset as given, in a process whose time zone is New York", () => {
  const script = `import { isoDate } from ${JSON.stringify(`${import.meta.dir}/../../src/providers/json-event.ts`)};
    console.log(JSON.stringify({ local: new Date("2024-04-12T10:18:49").toISOString(),
      read: Object.keys(${JSON.stringify(CASES)}).map((t) => isoDate(t)?.toISOString() ?? null) }));`;
  const run = Bun.spawnSync([process.execPath, "-e", script], { env: { ...process.env, TZ: "America/New_York" } });
  expect(run.exitCode).toBe(0);
  const out = JSON.parse(run.stdout.toString()) as { local: string; read: string[] };
  // The child really runs in New York time: `Date` alone reads the offset-less text 4 hours later.
  expect(out.local).toBe("2024-04-12T14:18:49.000Z");
  expect(out.read).toEqual(Object.values(CASES));
  expect(Object.keys(CASES).map((t) => isoDate(t)?.toISOString())).toEqual(Object.values(CASES));
});

test("`isoDate()` is none for a text that is not an RFC 3339 date-time, even one `Date` would read in the local zone", () => {
  for (const text of ["April 12, 2024 10:18", "2024-04-12", "12/04/2024 10:18:49", "2024-13-40T99:99:99Z", "", "1712917129"])
    expect(isoDate(text)).toBeUndefined();
  expect(isoDate(1712917129)).toBeUndefined();
});
