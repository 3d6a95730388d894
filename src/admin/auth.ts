// Who may use the operator's page, and whether a POST came from one of its own forms. Web Crypto
// only (SubtleCrypto), so it runs on every runtime the receiver does.
import { sameText } from "../providers/hmac.ts";

/** How a request proved it holds the admin token. */
export type Credential = "basic" | "bearer";

/** How long a form's CSRF token stays valid, ms: a working day. */
const CSRF_LIFETIME_MS = 12 * 3_600_000;

const encoder = new TextEncoder();

/** The admin token's checks, built once per app by {@link createAdminAuth}. */
export interface AdminAuth {
  /**
   * Which credential `request` carries the token in: HTTP Basic (any user name, the token as the
   * password; RFC 7617) or `Authorization: Bearer` (RFC 6750); null for none or a wrong one.
   * Compared in constant time.
   */
  check(request: Request): Promise<Credential | null>;
  /** A fresh CSRF pair for a form: `nonce` (issue time and 16 random bytes) and `token` = HMAC(admin token, nonce). */
  issueCsrf(): Promise<{ nonce: string; token: string }>;
  /** True when `token` is the HMAC of `nonce` under the admin token and `nonce` was issued within the last 12 h (and not in the future). */
  verifyCsrf(nonce: string, token: string): Promise<boolean>;
}

const hex = (bytes: ArrayBuffer | Uint8Array): string => [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("");

async function hmacKey(secret: BufferSource): Promise<CryptoKey> {
  return crypto.subtle.importKey("raw", secret, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
}

/**
 * The checks for `adminToken`. Candidates are compared by HMAC-SHA-256 under a random key made here,
 * digest against digest with no early exit, so neither the token's length nor a matching prefix
 * shows in the time taken. CSRF tokens are HMACs under a key derived from the admin token (a
 * different label from any other use), so they survive a restart and cannot be made without it.
 * `now` is the clock, ms since the epoch.
 */
export function createAdminAuth(adminToken: string, now: () => number = Date.now): AdminAuth {
  const keys = (async () => ({
    compare: await hmacKey(crypto.getRandomValues(new Uint8Array(32))),
    csrf: await hmacKey(encoder.encode(`webhook-inbox admin csrf\u0000${adminToken}`)),
  }))();
  const sign = async (key: CryptoKey, text: string) => new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(text)));
  const expected = keys.then((k) => sign(k.compare, adminToken));

  async function matches(candidate: string): Promise<boolean> {
    const [a, b] = [await sign((await keys).compare, candidate), await expected];
    let diff = a.length ^ b.length;
    for (let i = 0; i < a.length; i++) diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
    return diff === 0;
  }

  return {
    async check(request) {
      const header = request.headers.get("authorization") ?? "";
      const [scheme = "", value = ""] = header.trim().split(/\s+/, 2);
      if (/^bearer$/i.test(scheme)) return (await matches(value)) ? "bearer" : null;
      if (!/^basic$/i.test(scheme)) return null;
      let decoded: string;
      try {
        decoded = new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(atob(value), (c) => c.charCodeAt(0)));
      } catch {
        return null;
      }
      const colon = decoded.indexOf(":");
      return colon >= 0 && (await matches(decoded.slice(colon + 1))) ? "basic" : null;
    },
    async issueCsrf() {
      const nonce = `${now()}.${hex(crypto.getRandomValues(new Uint8Array(16)))}`;
      return { nonce, token: hex(await sign((await keys).csrf, nonce)) };
    },
    async verifyCsrf(nonce, token) {
      const issued = Number(nonce.split(".")[0]);
      if (!/^\d+\.[0-9a-f]{32}$/.test(nonce) || now() - issued > CSRF_LIFETIME_MS || issued > now() + 60_000) return false;
      return sameText(hex(await sign((await keys).csrf, nonce)), token);
    },
  };
}

/**
 * True when a browser says the request came from this site: `Sec-Fetch-Site`, when sent, is
 * `same-origin`, and `Origin`, when sent, names the request URL's own host and port (the scheme is
 * not compared: behind a proxy that terminates TLS the request URL says http). A request with neither
 * header is not a browser's cross-site form (every current browser sends at least one on a POST).
 */
export function sameOrigin(request: Request): boolean {
  const site = request.headers.get("sec-fetch-site");
  if (site !== null && site !== "same-origin") return false;
  const origin = request.headers.get("origin");
  if (origin === null) return true;
  try {
    return new URL(origin).host === new URL(request.url).host;
  } catch {
    return false; // "null" (a sandboxed or file: page) or garbage
  }
}
