// The development signing secret file (.data/dev-webhook-secret): an emptied file is an error naming it,
// not a silent "no secret" (which serve and deliver reported as a missing STRIPE_WEBHOOK_SECRET).
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readDevSecret } from "../../src/runtime/database.ts";

test("readDevSecret() returns the trimmed secret, and refuses an empty file by its path", () => {
  const dir = mkdtempSync(join(tmpdir(), "wi-dev-secret-"));
  try {
    const file = join(dir, "dev-webhook-secret");
    writeFileSync(file, "whsec_dev_abc\n");
    expect(readDevSecret(file)).toBe("whsec_dev_abc");
    writeFileSync(file, " \n");
    expect(() => readDevSecret(file)).toThrow(`${file} is empty: delete it`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
