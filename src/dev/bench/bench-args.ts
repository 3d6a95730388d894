// The command line of a bench script (bench:retention, bench:migration, bench:health, bench:claim): its
// options parsed with node:util parseArgs, `--help` printing the usage, and whole-number options checked,
// each mistake one line and the usage on stderr with exit 2, before any database exists.
import { parseArgs, type ParseArgsConfig } from "node:util";

/** The parsed values of `options`: a boolean option's as a boolean, a string option's as a string, absent when not given. */
export type BenchValues<O> = { [K in keyof O]?: O[K] extends { type: "boolean" } ? boolean : string };

/** What {@link benchArgs} returns: the parsed options and the checks that exit 2 naming the option. */
export interface BenchArgs<V> {
  values: V;
  /** Prints `problem` and the usage to stderr and exits 2. */
  usage(problem: string): never;
  /** `--name`'s value (or `fallback`) as a whole number ≥ `min` (default 1); exits 2 with the reason otherwise. */
  whole(name: string, value: string | undefined, fallback: number, min?: number): number;
}

/**
 * Parses `process.argv` with `options` (a `help` flag, `-h`, is added) for the bench script `script`
 * (e.g. "bench:health"): `--help` prints `usage` and exits 0; an unknown option or a missing value
 * prints the error and `usage` on stderr and exits 2.
 */
export function benchArgs<O extends NonNullable<ParseArgsConfig["options"]>>(
  script: string,
  usage: string,
  options: O,
): BenchArgs<BenchValues<O>> {
  const fail = (problem: string): never => {
    console.error(`${script}: ${problem}\n\n${usage}`);
    process.exit(2);
  };
  const parsed = (() => {
    try {
      return parseArgs({ options: { ...options, help: { type: "boolean", short: "h", default: false } } });
    } catch (err) {
      return fail(err instanceof Error ? err.message : String(err));
    }
  })();
  if ((parsed.values as { help?: boolean }).help) {
    console.log(usage);
    process.exit(0);
  }
  const whole = (name: string, value: string | undefined, fallback: number, min = 1): number => {
    const n = Number(value ?? fallback);
    if (Number.isInteger(n) && n >= min) return n;
    return fail(`--${name} must be a whole number${min > 0 ? ` ≥ ${min}` : ""}, got ${JSON.stringify(value)}`);
  };
  return { values: parsed.values as BenchValues<O>, usage: fail, whole };
}
