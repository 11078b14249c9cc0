/**
 * The artifact store: JSON documents by key (batch checkpoints, results,
 * review output). Keys are relative, slash-separated and may never climb out
 * of the prefix they are resolved under.
 */
export interface ArtifactStore {
  readonly kind: 'fs' | 's3';
  putJson(key: string, value: unknown): Promise<void>;
  /** null when absent. */
  getJson<T = unknown>(key: string): Promise<T | null>;
  exists(key: string): Promise<boolean>;
  /** Keys below a prefix (relative to the store, sorted). */
  list(prefix: string): Promise<string[]>;
  delete(key: string): Promise<void>;
  /** Prepare the backend (create the directory or bucket). Idempotent. */
  init(): Promise<void>;
  close(): Promise<void>;
}

export class InvalidKeyError extends Error {
  override name = 'InvalidKeyError';
}

const SEGMENT = /^[A-Za-z0-9._:@=+-]+$/;

/**
 * Validates a relative object key and returns it unchanged. Refused: empty,
 * absolute, backslashes, NUL and control characters, percent signs (so no
 * encoded traversal can be decoded later by anyone), empty segments and the
 * `.`/`..` segments.
 */
export function assertSafeKey(key: string, { allowTrailingSlash = false } = {}): string {
  if (typeof key !== 'string' || key.length === 0 || key.length > 1024)
    throw new InvalidKeyError('Key is empty or too long.');
  if (key.startsWith('/')) throw new InvalidKeyError('Key must be relative.');
  const parts = key.split('/');
  if (allowTrailingSlash && parts[parts.length - 1] === '') parts.pop();
  for (const p of parts) {
    if (p === '' || p === '.' || p === '..' || !SEGMENT.test(p))
      throw new InvalidKeyError(`Key segment "${p}" is not allowed.`);
  }
  return key;
}
