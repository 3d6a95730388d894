// printable() and printableJson(): event text on an operator's terminal (src/ops/printable.ts).
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { printable, printableJson } from "../../src/ops/printable.ts";

const UNSAFE = /[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/;

describe("printable()", () => {
  test("`printable()` writes controls as \\xHH and bidirectional or invisible characters as \\uHHHH, leaving other text alone", () => {
    expect(printable("evt_\u202eabc\x1b[31m\n\t\x7f\x85\u2066\u200b\ufeff")).toBe(
      "evt_\\u202eabc\\x1b[31m\\x0a\\x09\\x7f\\x85\\u2066\\u200b\\ufeff",
    );
    expect(printable("invoice.paid ünïcode € 😀 back\\slash")).toBe("invoice.paid ünïcode € 😀 back\\slash");
  });

  test("`printableJson()` is valid JSON of exactly the same value and holds no unsafe character, for any strings", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.string({ unit: "binary" }), (value, text) => {
        const doc = { value, text, [text]: text };
        const out = printableJson(doc);
        expect(UNSAFE.test(out.replaceAll("\n", ""))).toBe(false); // the only raw control left is the indentation's newline
        expect(JSON.parse(out)).toEqual(JSON.parse(JSON.stringify(doc)));
      }),
      { numRuns: 300 },
    );
  });
});
