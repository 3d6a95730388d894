// openDatabase(): the settings every command reads before it touches a database (src/runtime/database.ts).
import { expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { openDatabase } from "../../src/runtime/database.ts";
import { freePort, portTakenMessage, temporaryDataDir } from "../../src/runtime/embedded-postgres.ts";
import { runningPostmaster, stopDevDatabase, withStartLock } from "../../src/runtime/dev-database.ts";

test("`openDatabase()` refuses an unreadable DATABASE_URL without quoting it (the password would be in it)", async () => {
  const error = await openDatabase({ DATABASE_URL: "postgres://app:SEC/RET-pw@db.internal/inbox" }).catch((err: unknown) => err as Error);
  expect(error).toBeInstanceOf(Error);
  expect((error as Error).message).toStartWith("DATABASE_URL cannot be read unambiguously (value not shown)");
  expect((error as Error).message).not.toContain("RET-pw");
});

test("`openDatabase()` refuses an EMBEDDED_PG_PORT that is not a port (0 or text would start a server no later command finds)", async () => {
  for (const port of ["abc", "0", "70000", "54.5"]) {
    await expect(openDatabase({ EMBEDDED_PG_PORT: port })).rejects.toThrow(
      `EMBEDDED_PG_PORT must be a port number from 1 to 65535, got "${port}"`,
    );
  }
});

test("`openDatabase()` refuses the embedded development server when NODE_ENV=production", async () => {
  await expect(openDatabase({ NODE_ENV: "production" })).rejects.toThrow("DATABASE_URL is required when NODE_ENV=production");
});

test("`openDatabase()` refuses an unknown NODE_ENV before any other setting, naming the variable", async () => {
  await expect(openDatabase({ NODE_ENV: "prod", EMBEDDED_PG_PORT: "0" })).rejects.toThrow(
    'NODE_ENV must be production, development or test (or unset), got "prod"',
  );
});

test("`openDatabase()` says the embedded port is taken by another program, and initialises no cluster", async () => {
  const port = await freePort();
  const other = createServer();
  await new Promise<void>((resolve) => other.listen(port, "127.0.0.1", resolve));
  const dir = await temporaryDataDir("webhook-inbox-port-taken-");
  try {
    const error = await openDatabase({ EMBEDDED_PG_DIR: dir, EMBEDDED_PG_PORT: String(port) }).catch((err: unknown) => err as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toBe(portTakenMessage(port));
    expect(portTakenMessage(port)).toContain(`port ${port} on 127.0.0.1 is already in use by another program`);
    expect(portTakenMessage(port)).toContain("set EMBEDDED_PG_PORT to a free port");
    expect(existsSync(join(dir, "PG_VERSION"))).toBe(false);
  } finally {
    await new Promise((resolve) => other.close(resolve));
    await rm(dirname(dir), { recursive: true, force: true });
  }
}, 60_000);

test("`openDatabase()` called twice at once on a new data directory starts one server and both use it, instead of failing both on the port", async () => {
  const dir = await temporaryDataDir("webhook-inbox-two-starts-");
  const env = { EMBEDDED_PG_DIR: dir, EMBEDDED_PG_PORT: String(await freePort()) };
  const opened = await Promise.allSettled([openDatabase(env), openDatabase(env)]);
  try {
    expect(opened.map((o) => o.status)).toEqual(["fulfilled", "fulfilled"]);
    const handles = opened.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
    expect(handles[0]!.url).toBe(handles[1]!.url);
    expect(existsSync(`${dir}.starting`)).toBe(false); // the start lock is given back
    expect(runningPostmaster(dir)?.port).toBe(Number(env.EMBEDDED_PG_PORT)); // it outlives both: db:stop stops it
  } finally {
    await stopDevDatabase(dir);
    await rm(dirname(dir), { recursive: true, force: true });
  }
}, 120_000);

test("`openDatabase()` with another EMBEDDED_PG_PORT than the running embedded server's names the port to use and starts nothing; without one it uses the running server's", async () => {
  const dir = await temporaryDataDir("webhook-inbox-other-port-");
  const port = await freePort();
  const first = await openDatabase({ EMBEDDED_PG_DIR: dir, EMBEDDED_PG_PORT: String(port) });
  try {
    const other = await freePort();
    const error = await openDatabase({ EMBEDDED_PG_DIR: dir, EMBEDDED_PG_PORT: String(other) }).catch((err: unknown) => err as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toStartWith(`The embedded PostgreSQL in ${dir} runs on port ${port}, not ${other}`);
    expect((error as Error).message).toEndWith(`leave EMBEDDED_PG_PORT unset or set it to ${port}`);
    // The first server still answers: nothing was started or stopped on the directory.
    const again = await openDatabase({ EMBEDDED_PG_DIR: dir, EMBEDDED_PG_PORT: String(port) });
    expect(again.url).toBe(first.url);
    // Without EMBEDDED_PG_PORT the running server is found on its own port, not the default 54329.
    const found = await openDatabase({ EMBEDDED_PG_DIR: dir });
    expect(found).toEqual({ url: first.url, embedded: true });
    expect(first.url).toContain(`127.0.0.1:${port}/`);
  } finally {
    await stopDevDatabase(dir);
    await rm(dirname(dir), { recursive: true, force: true });
  }
}, 120_000);

test("`withStartLock()` takes over a lock left by a process that is gone, and names a live holder's lock when it waited too long", async () => {
  const dir = await temporaryDataDir("webhook-inbox-start-lock-");
  try {
    const gone = Bun.spawn(["true"]);
    await gone.exited;
    writeFileSync(`${dir}.starting`, `${gone.pid}\n`);
    expect(await withStartLock(dir, async () => "ran")).toBe("ran");
    expect(existsSync(`${dir}.starting`)).toBe(false);
    writeFileSync(`${dir}.starting`, `${process.pid}\n`); // a live holder (this very process)
    await expect(withStartLock(dir, async () => "ran", undefined, 300)).rejects.toThrow(`remove ${dir}.starting if no such command runs`);
  } finally {
    await rm(dirname(dir), { recursive: true, force: true });
  }
});
