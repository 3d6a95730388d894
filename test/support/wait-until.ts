// Bounded polling for conditions another connection or process brings about.

/**
 * Calls `check` every `intervalMs` until it returns true; throws naming `what` after `timeoutMs`.
 * A bound, never an assertion about speed: the tests assert what happened, not how fast.
 */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  options: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Cannot observe ${what} within ${timeoutMs} ms`);
    await Bun.sleep(options.intervalMs ?? 10);
  }
}
