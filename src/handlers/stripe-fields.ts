import { PermanentError } from "../errors.ts";

/**
 * Reads the fields of a Stripe object that money-out handlers use and collects the names of the bad
 * ones, so one PermanentError names every missing or mistyped field (never a value).
 */
export class StripeFields {
  readonly bad: string[] = [];
  constructor(private readonly object: Record<string, unknown>) {}

  /** An id with `prefix` (e.g. "re_"), given as a string or as an expanded object's `id`; null when absent and `optional`. */
  id(field: string, prefix: string, optional = false): string | null {
    const raw = this.object[field];
    const value = typeof raw === "object" && raw !== null ? (raw as { id?: unknown }).id : raw;
    if (value === undefined || value === null) {
      if (!optional) this.bad.push(field);
      return null;
    }
    if (typeof value !== "string" || !value.startsWith(prefix) || !/^[A-Za-z0-9_]{4,255}$/.test(value)) {
      this.bad.push(field);
      return null;
    }
    return value;
  }

  /** A whole number of minor currency units (may be negative when `signed`). */
  amount(field: string, signed = false): number {
    const value = this.object[field];
    if (!Number.isSafeInteger(value) || (!signed && (value as number) < 0)) this.bad.push(field);
    return value as number;
  }

  /** A three-letter lowercase ISO 4217 code, as Stripe sends it. */
  currency(field = "currency"): string {
    const value = this.object[field];
    if (typeof value !== "string" || !/^[a-z]{3}$/.test(value)) this.bad.push(field);
    return value as string;
  }

  /** One of `allowed`. */
  oneOf<T extends string>(field: string, allowed: readonly T[]): T {
    const value = this.object[field];
    if (typeof value !== "string" || !allowed.includes(value as T)) this.bad.push(field);
    return value as T;
  }

  /** Throws PermanentError("Cannot apply <what>: missing or invalid field(s) …") if any read failed. */
  check(what: string): void {
    if (this.bad.length > 0) throw new PermanentError(`Cannot apply ${what}: missing or invalid field(s) ${this.bad.join(", ")}`);
  }
}
