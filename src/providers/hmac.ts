// HMAC-SHA256 on SubtleCrypto (Web Crypto API, W3C "Web Cryptography API", HMAC), shared by the
// providers that sign with it. Signatures are compared by `crypto.subtle.verify`, which compares in
// constant time, never by `===` on strings.

const encoder = new TextEncoder();
// Imported keys by secret text; a few per endpoint, kept for the life of the process.
const keys = new Map<string, Promise<CryptoKey>>();

/** The key of `secret` for HMAC-SHA256 sign and verify: its UTF-8 bytes, or the given bytes (Adyen's hex key, decoded). */
function keyFor(secret: string | Uint8Array): Promise<CryptoKey> {
  const id = typeof secret === "string" ? `t:${secret}` : `b:${toHex(secret)}`;
  let key = keys.get(id);
  if (!key) {
    const raw = typeof secret === "string" ? encoder.encode(secret) : secret;
    key = crypto.subtle.importKey("raw", raw as BufferSource, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
    keys.set(id, key);
  }
  return key;
}

/** HMAC-SHA256 of `message` (UTF-8) with `secret` (a text's UTF-8 bytes, or raw key bytes): 32 bytes. */
export async function hmacSha256(secret: string | Uint8Array, message: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.sign("HMAC", await keyFor(secret), encoder.encode(message)));
}

/**
 * True when one of `signatures` is the HMAC-SHA256 of `message` with one of `secrets`. Each pair is
 * checked by `crypto.subtle.verify` (constant-time in the signature's bytes); every pair is tried, so
 * the time taken does not say which secret matched.
 */
export async function anyHmacMatches(
  secrets: readonly (string | Uint8Array)[],
  message: string,
  signatures: readonly Uint8Array[],
): Promise<boolean> {
  const data = encoder.encode(message);
  let matched = false;
  for (const secret of secrets) {
    const key = await keyFor(secret);
    for (const signature of signatures) {
      if (await crypto.subtle.verify("HMAC", key, signature as BufferSource, data)) matched = true;
    }
  }
  return matched;
}

/** Whether `a` and `b` are the same text, compared in time that depends on their lengths only (signatures, tokens of a public length). */
export function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** Lowercase hex of `bytes`. */
export function toHex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The bytes of an even-length hex text (either case), or undefined when it is not one. */
export function fromHex(text: string): Uint8Array | undefined {
  if (text.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(text)) return undefined;
  const bytes = new Uint8Array(text.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = Number.parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

/** Standard base64 (RFC 4648 §4, with padding) of `bytes`. */
export function toBase64(bytes: Uint8Array): string {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

/** The bytes of a standard padded base64 text (RFC 4648 §4), or undefined when it is not one. */
export function fromBase64(text: string): Uint8Array | undefined {
  if (text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return undefined;
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
}
