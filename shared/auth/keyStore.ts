/**
 * API key records in Postgres. Only the SHA-256 hash of a key is stored; the
 * presenter turns rows into the interface's key record (section 2.9).
 */
import type { Knex } from 'knex';
import type { PlanCatalog, PlanLimits } from '../plans.js';
import { generateApiKey, generateKeyId, hashApiKey, keyPrefixOf, lastFourOf } from './keys.js';

export interface KeyRow {
  id: string;
  owner_id: string;
  plan: string;
  label: string | null;
  key_hash: string;
  key_prefix: string;
  last_four: string;
  status: string;
  expires_at: Date | null;
  revoked_at: Date | null;
  last_used_at: Date | null;
  created_at: Date;
}

export type KeyStatus = 'active' | 'revoked' | 'expired';

export interface KeyRecord {
  key?: string;
  id: string;
  ownerId: string;
  keyPrefix: string;
  lastFour: string;
  plan: string;
  status: KeyStatus;
  label: string | null;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
  createdAt: string;
  limits: PlanLimits;
}

export function effectiveStatus(
  row: Pick<KeyRow, 'status' | 'revoked_at' | 'expires_at'>,
  now = Date.now(),
): KeyStatus {
  if (row.status === 'revoked' || row.revoked_at) return 'revoked';
  if (row.expires_at && row.expires_at.getTime() <= now) return 'expired';
  return 'active';
}

const iso = (d: Date | null): string | null => (d ? d.toISOString() : null);

export class KeyStore {
  constructor(
    private readonly db: Knex,
    private readonly plans: PlanCatalog,
  ) {}

  /** The current status of each of these keys (one query); unknown ids are missing from the map. */
  async statuses(ids: string[], now = Date.now()): Promise<Map<string, KeyStatus>> {
    if (ids.length === 0) return new Map();
    const rows = await this.db<KeyRow>('api_keys')
      .whereIn('id', ids)
      .select('id', 'status', 'revoked_at', 'expires_at');
    return new Map(rows.map((r) => [r.id, effectiveStatus(r, now)]));
  }

  present(row: KeyRow, plaintext?: string): KeyRecord {
    return {
      ...(plaintext ? { key: plaintext } : {}),
      id: row.id,
      ownerId: row.owner_id,
      keyPrefix: row.key_prefix,
      lastFour: row.last_four,
      plan: row.plan,
      status: effectiveStatus(row),
      label: row.label,
      expiresAt: iso(row.expires_at),
      revokedAt: iso(row.revoked_at),
      lastUsedAt: iso(row.last_used_at),
      createdAt: row.created_at.toISOString(),
      limits: this.plans.has(row.plan) ? this.plans.limits(row.plan) : this.plans.limits('free'),
    };
  }

  async issue(input: {
    ownerId: string;
    plan: string;
    label?: string;
    expiresAt?: Date;
  }): Promise<KeyRecord> {
    const key = generateApiKey();
    const [row] = await this.db<KeyRow>('api_keys')
      .insert({
        id: generateKeyId(),
        owner_id: input.ownerId,
        plan: input.plan,
        label: input.label ?? null,
        key_hash: hashApiKey(key),
        key_prefix: keyPrefixOf(key),
        last_four: lastFourOf(key),
        status: 'active',
        expires_at: input.expiresAt ?? null,
      })
      .returning('*');
    return this.present(row, key);
  }

  async list(filter: { ownerId?: string; limit?: number } = {}): Promise<KeyRecord[]> {
    const q = this.db<KeyRow>('api_keys')
      .orderBy('created_at', 'desc')
      .limit(filter.limit ?? 1000);
    if (filter.ownerId !== undefined) q.where('owner_id', filter.ownerId);
    return (await q).map((r) => this.present(r));
  }

  async get(id: string): Promise<KeyRow | undefined> {
    return this.db<KeyRow>('api_keys').where('id', id).first<KeyRow | undefined>();
  }

  async findByHash(hash: string): Promise<KeyRow | undefined> {
    return this.db<KeyRow>('api_keys').where('key_hash', hash).first<KeyRow | undefined>();
  }

  /** Revokes a key; revoking twice keeps the first revocation time. */
  async revoke(id: string): Promise<KeyRow | undefined> {
    const [row] = await this.db<KeyRow>('api_keys')
      .where('id', id)
      .update({
        status: 'revoked',
        revoked_at: this.db.raw('coalesce(revoked_at, now())') as unknown as Date,
      })
      .returning('*');
    return row;
  }

  /** Writes buffered last-used times in one statement. */
  async touch(lastUsed: Map<string, Date>): Promise<void> {
    if (lastUsed.size === 0) return;
    const ids = [...lastUsed.keys()];
    const times = ids.map((id) => lastUsed.get(id)!.toISOString());
    await this.db.raw(
      `UPDATE api_keys AS k SET last_used_at = GREATEST(coalesce(k.last_used_at, v.t), v.t)
       FROM unnest(?::text[], ?::timestamptz[]) AS v(id, t) WHERE k.id = v.id`,
      [ids, times],
    );
  }
}
