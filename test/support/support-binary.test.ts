import { expect, test } from "bun:test";
import { binaryRequired, findBinary } from "./support-binary.ts";

test("`findBinary()` finds a program in PATH and nothing for a missing one", () => {
  expect(findBinary("ls", { PATH: "/usr/bin:/bin" })).toMatch(/\/ls$/);
  expect(findBinary("no-such-program-webhook-inbox", { PATH: "/usr/bin:/bin" })).toBeUndefined();
});

test("`findBinary()` takes `<NAME>_BIN` over the search, so an installed program can be hidden", () => {
  const ls = findBinary("ls", { PATH: "/usr/bin:/bin" });
  expect(ls).toBeDefined();
  expect(findBinary("pgbouncer", { PATH: "/usr/bin:/bin", PGBOUNCER_BIN: ls })).toBe(ls);
  expect(findBinary("pgbouncer", { PATH: "/usr/bin:/bin:/usr/sbin", PGBOUNCER_BIN: "/nonexistent/pgbouncer" })).toBeUndefined();
});

test("`binaryRequired()` is true under CI or `REQUIRE_<NAME>=1`, false otherwise", () => {
  expect(binaryRequired("pgbouncer", {})).toBe(false);
  expect(binaryRequired("pgbouncer", { CI: "false" })).toBe(false);
  expect(binaryRequired("pgbouncer", { CI: "true" })).toBe(true);
  expect(binaryRequired("pgbouncer", { REQUIRE_PGBOUNCER: "1" })).toBe(true);
  expect(binaryRequired("pgbench", { REQUIRE_PGBOUNCER: "1" })).toBe(false);
});
