/**
 * Artifact store factory and tenant scoping. Physical keys are
 * `{ARTIFACT_PREFIX}tenants/{owner-hash}/{key}`: each tenant sees its own key
 * space (`transcription/{request_id}/…` in the interface), so two tenants
 * using the same request_id never share or read each other's checkpoints.
 */
import { createHash } from 'node:crypto';
import type { ArtifactStoreConfig } from '../../../shared/config/batch.js';
import { FsArtifactStore } from './fs.js';
import { S3ArtifactStore } from './s3.js';
import { type ArtifactStore, assertSafeKey } from './types.js';

export { type ArtifactStore, InvalidKeyError, assertSafeKey } from './types.js';
export { FsArtifactStore } from './fs.js';
export { S3ArtifactStore } from './s3.js';

export function createArtifactStore(cfg: ArtifactStoreConfig): ArtifactStore {
  return cfg.driver === 's3'
    ? new S3ArtifactStore(cfg.s3, cfg.prefix)
    : new FsArtifactStore(cfg.dir, cfg.prefix);
}

/** A view of a store below a fixed prefix; keys given to it cannot leave the prefix. */
export class PrefixedStore implements ArtifactStore {
  constructor(
    private readonly inner: ArtifactStore,
    readonly prefix: string,
  ) {}
  get kind() {
    return this.inner.kind;
  }
  private k(key: string): string {
    return this.prefix + assertSafeKey(key);
  }
  putJson(key: string, value: unknown) {
    return this.inner.putJson(this.k(key), value);
  }
  getJson<T>(key: string) {
    return this.inner.getJson<T>(this.k(key));
  }
  exists(key: string) {
    return this.inner.exists(this.k(key));
  }
  async list(prefix: string) {
    const keys = await this.inner.list(this.prefix + prefix);
    return keys.map((k) => k.slice(this.prefix.length));
  }
  delete(key: string) {
    return this.inner.delete(this.k(key));
  }
  init() {
    return this.inner.init();
  }
  async close() {}
}

export function ownerPrefix(ownerId: string): string {
  return `tenants/${createHash('sha256').update(ownerId).digest('hex').slice(0, 32)}/`;
}

export function tenantStore(store: ArtifactStore, ownerId: string): ArtifactStore {
  return new PrefixedStore(store, ownerPrefix(ownerId));
}
