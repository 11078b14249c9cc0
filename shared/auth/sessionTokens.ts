/**
 * Realtime session tokens: `rt_` + base64url(payload) + "." + base64url(HMAC-SHA256).
 * The payload binds the token to the issuing key id and an expiry; the key's
 * own status is checked again when the token is used, so a token of a key
 * revoked since is refused.
 */
import { type KeyObject, createHmac, createSecretKey, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Nonces (72 random bits, 12 base64url characters) are cut from a pool of 455
 * made at once: one getrandom call and one base64 encoding per 455 tokens.
 */
const NONCE_CHARS = 12;
let pool = '';
let offset = 0;
function nonce(): string {
  if (offset + NONCE_CHARS > pool.length) {
    pool = randomBytes((455 * NONCE_CHARS * 3) / 4).toString('base64url');
    offset = 0;
  }
  offset += NONCE_CHARS;
  return pool.slice(offset - NONCE_CHARS, offset);
}

export const SESSION_TOKEN_PREFIX = 'rt_';

/** Key ids that are JSON strings as they are. */
const PLAIN_ID = /^[A-Za-z0-9_.:-]*$/;

export interface SessionTokenClaims {
  /** Key id the token was issued for. */
  kid: string;
  /** Expiry, seconds since the epoch. */
  exp: number;
  /** Issued at, seconds since the epoch. */
  iat: number;
  /** Random nonce so two tokens issued in the same second differ. */
  n: string;
}

/** The secret as a KeyObject, made once: createHmac would otherwise convert the string on every call. */
let signingKey: { secret: string; key: KeyObject } | undefined;
function keyOf(secret: string): KeyObject {
  if (signingKey?.secret !== secret) signingKey = { secret, key: createSecretKey(secret, 'utf8') };
  return signingKey.key;
}

function sign(secret: string, payload: string): Buffer {
  return createHmac('sha256', keyOf(secret)).update(payload).digest();
}

export function issueSessionToken(
  secret: string,
  keyId: string,
  ttlSeconds: number,
  nowMs = Date.now(),
): { token: string; claims: SessionTokenClaims } {
  const iat = Math.floor(nowMs / 1000);
  const claims: SessionTokenClaims = { kid: keyId, iat, exp: iat + ttlSeconds, n: nonce() };
  // The same JSON as JSON.stringify(claims), without its cost when the key id needs no escaping (ours never does).
  const plain = PLAIN_ID.test(keyId);
  const json = `{"kid":${plain ? `"${keyId}"` : JSON.stringify(keyId)},"iat":${claims.iat},"exp":${claims.exp},"n":"${claims.n}"}`;
  const payload = Buffer.from(json, plain ? 'latin1' : 'utf8').toString('base64url');
  const signature = createHmac('sha256', keyOf(secret)).update(payload).digest('base64url');
  return { token: `${SESSION_TOKEN_PREFIX}${payload}.${signature}`, claims };
}

/** An HMAC-SHA256 in unpadded base64url: 32 bytes are 43 characters, the last one of 16 (its low bits zero). */
const CANONICAL_SIGNATURE = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

/** Returns the claims of a valid, unexpired token, or null. */
export function verifySessionToken(
  secret: string,
  token: string,
  nowMs = Date.now(),
): SessionTokenClaims | null {
  if (!token.startsWith(SESSION_TOKEN_PREFIX) || token.length > 1024) return null;
  const body = token.slice(SESSION_TOKEN_PREFIX.length);
  const dot = body.indexOf('.');
  if (dot <= 0) return null;
  const payload = body.slice(0, dot);
  // Only the canonical spelling: Node's base64url decoder skips characters it does not know and
  // accepts padding and standard base64, so `sig + "="`, `sig + "!!"` or `+/` for `-_` would pass.
  const text = body.slice(dot + 1);
  if (!CANONICAL_SIGNATURE.test(text)) return null;
  const given = Buffer.from(text, 'base64url');
  const expected = sign(secret, payload);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
  let claims: SessionTokenClaims;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as SessionTokenClaims;
  } catch {
    return null;
  }
  if (typeof claims.kid !== 'string' || typeof claims.exp !== 'number') return null;
  if (claims.exp * 1000 <= nowMs) return null;
  return claims;
}
