// README's list of Stripe event types to subscribe to is the shipped handler table's: a handled type
// missing from it would never be sent to a team that copies the list, and nothing could report it.
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { stripeHandlers } from "../src/handlers/stripe-money.ts";

test("README's `--events` list names exactly the event types the shipped Stripe handlers apply", () => {
  const readme = readFileSync(join(import.meta.dir, "..", "README.md"), "utf8");
  const lines = readme.slice(readme.indexOf("--events ") + "--events ".length).split("\n");
  const continued = lines.slice(0, lines.findIndex((l) => !l.endsWith("\\")) + 1);
  const listed = continued.map((l) => l.replace(/\\$/, "")).join("").split(",").map((t) => t.trim());
  expect(listed.toSorted()).toEqual(Object.keys(stripeHandlers).toSorted());
});
