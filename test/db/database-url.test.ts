// databaseUrlProblem(): a DATABASE_URL is either read the same way by every reader (our check,
// postgres.js, WHATWG URL) or refused with a message that quotes none of it.
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import postgres from "postgres";
import { databaseUrlProblem } from "../../src/config.ts";

/** What postgres.js would connect with, read from its parsed options (nothing connects or resolves). */
function postgresReads(url: string): { user: string; pass: string; host: string[]; port: number[]; database: string } {
  const sql = postgres(url, { onnotice: () => {} });
  const { user, pass, host, port, database } = sql.options as unknown as {
    user: string;
    pass: string | null;
    host: string[];
    port: number[];
    database: string;
  };
  void sql.end();
  return { user, pass: pass ?? "", host, port, database };
}

/** Every substring of `secret` at least `min` characters long that holds a letter or digit. */
function pieces(secret: string, min = 3): string[] {
  const out: string[] = [];
  for (let i = 0; i < secret.length; i++) {
    for (let j = i + min; j <= secret.length; j++) {
      const piece = secret.slice(i, j);
      if (/[A-Za-z0-9]/.test(piece)) out.push(piece);
    }
  }
  return out;
}

function expectNoPiece(message: string, secret: string, min = 3): void {
  for (const piece of pieces(secret, min)) {
    if (message.toLowerCase().includes(piece.toLowerCase())) throw new Error(`The message quotes "${piece}" of the password: ${message}`);
  }
}

describe("databaseUrlProblem()", () => {
  test.each([
    ["a password with an unencoded @ and #", "postgres://user:Kq7@Zx#W9v@127.0.0.1:5432/db", "Kq7@Zx#W9v"],
    ["a password with an unencoded #", "postgres://user:KqZx#W9v@db.internal:5432/db", "KqZx#W9v"],
    ["a password with an unencoded /", "postgres://app:QXC/ZKWJ@db.internal:5432/inbox", "QXC/ZKWJ"],
    ["a password with an unencoded ?", "postgres://app:QXJ?ZKW@db.internal/inbox", "QXJ?ZKW"],
    ["a password with two unencoded @", "postgres://app:QX@J@ZKW@db.internal/inbox", "QX@J@ZKW"],
    ["a password with an unencoded :", "postgres://app:QXJ:ZKW@db.internal/inbox", "QXJ:ZKW"],
    ["a password that ends in @ before the host", "postgres://app:QXJZKW@@db.internal/inbox", "QXJZKW@"],
    ["a password with a bad % escape", "postgres://app:hun%zzQXJ@db.internal/inbox", "hun%zzQXJ"],
    ["a password whose / hides the @", "postgres://app:QXJ/ZKW@localhost/inbox", "QXJ/ZKW"],
    ["a user name with an unencoded @", "postgres://QX@JZ:pw@db.internal/inbox", "QX@JZ"],
    ["no host after the user-info", "postgres://app:QXJZKW@/inbox", "QXJZKW"],
    ["a password where the host should be", "postgres://app:QXJZKW/inbox", "QXJZKW"],
    ["a port above 65535", "postgres://app:QXJZKW@db.internal:70000/inbox", "QXJZKW"],
    ['an IPv6 host, which postgres.js 3.4.9 reads as "["', "postgres://app:QXJZKW@[::1]:5432/inbox", "QXJZKW"],
    ["an IPv6 host among several", "postgres://app:QXJZKW@h1:5432,[::1]:5432/inbox", "QXJZKW"],
    ["another scheme", "mysql://app:QXJZKW@db.internal/inbox", "QXJZKW"],
    ["no scheme", "app:QXJZKW@db.internal/inbox", "QXJZKW"],
    [
      "target_session_attrs=read-write, which postgres.js 3.4.9 may satisfy with a hot standby",
      "postgres://app:QXJZKW@h1:5432,h2:5432/inbox?target_session_attrs=read-write",
      "QXJZKW",
    ],
  ])("`databaseUrlProblem()` refuses %s without quoting any of it", (_label, url, password) => {
    const problem = databaseUrlProblem(url);
    expect(problem).toBeDefined();
    expect(problem).toStartWith("DATABASE_URL ");
    expectNoPiece(problem ?? "", password, 2);
  });

  test("`databaseUrlProblem()` says how to fix an ambiguous user-info: percent-encode", () => {
    expect(databaseUrlProblem("postgres://user:p@ss#word@127.0.0.1:5432/db")).toContain("percent-encode");
    expect(databaseUrlProblem("postgres://user:p/ss@127.0.0.1:5432/db")).toContain("/ as %2F");
    expect(databaseUrlProblem("postgres://user:p%zz@127.0.0.1:5432/db")).toContain("write % as %25");
  });

  test.each([
    ["no user-info", "postgres://db.internal/inbox", { user: undefined, pass: "", host: ["db.internal"], port: [5432], database: "inbox" }],
    [
      "a user without a password",
      "postgres://app@db.internal:6432/inbox",
      { user: "app", pass: "", host: ["db.internal"], port: [6432], database: "inbox" },
    ],
    [
      "postgresql:// and no path",
      "postgresql://app:pw@127.0.0.1",
      { user: "app", pass: "pw", host: ["127.0.0.1"], port: [5432], database: "app" },
    ],
    [
      "a percent-encoded @ # / ? : % in the password",
      "postgres://app:p%40ss%23w%2Fo%3Fr%3Ad%25@db.internal:5432/inbox",
      { user: "app", pass: "p@ss#w/o?r:d%", host: ["db.internal"], port: [5432], database: "inbox" },
    ],
    [
      "a percent-encoded @ in the user name",
      "postgres://me%40corp:pw@db.internal/inbox",
      { user: "me@corp", pass: "pw", host: ["db.internal"], port: [5432], database: "inbox" },
    ],
    [
      "several hosts",
      "postgres://app:pw@h1:5432,h2:5433/inbox?target_session_attrs=primary",
      { user: "app", pass: "pw", host: ["h1", "h2"], port: [5432, 5433], database: "inbox" },
    ],
    [
      "a query string",
      "postgres://app:pw@db.internal/inbox?sslmode=require&application_name=x",
      { user: "app", pass: "pw", host: ["db.internal"], port: [5432], database: "inbox" },
    ],
    [
      "a space and unreserved marks in the password",
      "postgres://app:pa ss!*'()~-_.@db.internal/inbox",
      { user: "app", pass: "pa ss!*'()~-_.", host: ["db.internal"], port: [5432], database: "inbox" },
    ],
  ])("`databaseUrlProblem()` accepts %s, read by postgres.js as meant", (_label, url, meant) => {
    expect(databaseUrlProblem(url)).toBeUndefined();
    const read = postgresReads(url);
    expect({ ...read, user: meant.user === undefined ? undefined : read.user }).toEqual(meant);
  });

  test("`databaseUrlProblem()` either refuses a password with any characters without quoting it, or postgres.js reads exactly that password and host", () => {
    const char = fc.constantFrom(..."QXZJKW0189@:/?#% .-_!~'".split(""));
    const text = fc.array(char, { minLength: 1, maxLength: 12 }).map((cs) => cs.join(""));
    fc.assert(
      fc.property(text, text, (user, password) => {
        const url = `postgres://${user}:${password}@db.internal:5432/inbox`;
        const problem = databaseUrlProblem(url);
        if (problem !== undefined) {
          expectNoPiece(problem, password);
          expectNoPiece(problem, user);
          return;
        }
        const read = postgresReads(url);
        expect(read.host).toEqual(["db.internal"]);
        expect(read.port).toEqual([5432]);
        expect(read.user).toBe(decodeURIComponent(user));
        expect(read.pass).toBe(decodeURIComponent(password));
      }),
      { numRuns: 500 },
    );
  });

  test("`databaseUrlProblem()` accepts every percent-encoded user and password, and postgres.js reads them back exactly", () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 16, unit: "grapheme" }),
        fc.string({ minLength: 1, maxLength: 16, unit: "grapheme" }),
        (user, password) => {
          const url = `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@h1:5432,h2/inbox`;
          expect(databaseUrlProblem(url)).toBeUndefined();
          const read = postgresReads(url);
          expect([read.user, read.pass, read.host]).toEqual([user, password, ["h1", "h2"]]);
        },
      ),
      { numRuns: 300 },
    );
  });
});

test("`databaseUrlProblem()` accepts target_session_attrs=primary over several hosts, and names `primary` when refusing read-write", () => {
  expect(databaseUrlProblem("postgres://app:pw@h1:5432,h2:5432/inbox?target_session_attrs=primary")).toBeUndefined();
  expect(databaseUrlProblem("postgres://app:pw@h1:5432,h2:5432/inbox?target_session_attrs=read-write")).toContain("use target_session_attrs=primary");
});
