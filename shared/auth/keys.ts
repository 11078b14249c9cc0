/** API key material: generation, hashing and the shapes derived from a key. */
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export const KEY_PREFIX = 'sk-';
/** 40 base62 characters after the prefix: about 238 bits of entropy. */
const KEY_BODY_LENGTH = 40;
/** Interface section 5.2: at least 16 characters in all. */
export const MIN_KEY_LENGTH = 16;

function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const b of randomBytes(length * 2)) {
      // 248 = 4 * 62: reject the tail so every character is equally likely.
      if (b < 248 && out.length < length) out += ALPHABET[b % 62];
    }
  }
  return out;
}

export function generateApiKey(): string {
  return KEY_PREFIX + randomBase62(KEY_BODY_LENGTH);
}

export function generateKeyId(): string {
  return 'key_' + randomBytes(12).toString('hex');
}

/** SHA-256 hex of the key; one-shot `crypto.hash` (no Hash object per call: it runs on every authenticated request). */
export function hashApiKey(key: string): string {
  return hash('sha256', key, 'hex');
}

export function looksLikeApiKey(key: string): boolean {
  return (
    key.startsWith(KEY_PREFIX) &&
    key.length >= MIN_KEY_LENGTH &&
    key.length <= 256 &&
    /^[\x21-\x7e]+$/.test(key)
  );
}

export function keyPrefixOf(key: string): string {
  return key.slice(0, KEY_PREFIX.length + 9);
}

export function lastFourOf(key: string): string {
  return key.slice(-4);
}

/** Constant-time comparison of two secrets of any length. */
export function safeEqual(a: string, b: string): boolean {
  const ha = hash('sha256', a, 'buffer');
  const hb = hash('sha256', b, 'buffer');
  return timingSafeEqual(ha, hb) && a.length === b.length;
}
