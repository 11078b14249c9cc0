/**
 * API key records in Postgres. Only the SHA-256 hash of a key is stored; the
 * presenter turns rows into the interface's key record (section 2.9).
 */
import type { Knex } from 'knex';
import type { PlanCatalog, PlanLimits } from '../plans.js';
import type { VocabularyEntry } from '../stt/bias/compile.js';
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
  /** Words that bias the built-in engine on every request of the key (issue 37). */
  vocabulary?: VocabularyEntry[] | null;
}

export type KeyStatus = 'active' | 'revoked' | 'expired';

/**
 * The owner a key is issued with when none is given (interface 4.11). It
 * shares nothing (issue 41: every key issued without an owner could read
 * the others' jobs): the tenant of such a key is `default:<key id>`, which
 * no explicit owner id may spell (api/routes/admin/schemas.ts).
 */
export const DEFAULT_OWNER = 'default';

/** The tenant a key's requests act for: its owner, or the key alone for the default owner. */
export function tenantOf(row: Pick<KeyRow, 'id' | 'owner_id'>): string {
  return row.owner_id === DEFAULT_OWNER ? `${DEFAULT_OWNER}:${row.id}` : row.owner_id;
}

/** An `Idempotency-Key` already names another issue request (or a key no longer active). */
export class IdempotencyConflict extends Error {
  override name = 'IdempotencyConflict';
}

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

  /**
   * Issues a key (owner `default` is a tenant of its own: `tenantOf`). With `idempotencyKey`, a retry of the same request
   * (same fingerprint) answers the key it issued first, with a new secret:
   * the earlier plaintext, which the caller never received, stops working
   * (`replaced` is the row as it was, for the caller to drop from caches).
   * The same idempotency key with another request throws IdempotencyConflict.
   */
  async issue(input: {
    ownerId: string;
    plan: string;
    label?: string;
    expiresAt?: Date;
    idempotencyKey?: string;
  }): Promise<KeyRecord & { replaced?: KeyRow }> {
    const key = generateApiKey();
    const secret = { key_hash: hashApiKey(key), key_prefix: keyPrefixOf(key), last_four: lastFourOf(key) };
    const id = generateKeyId();
    const fingerprint = input.idempotencyKey
      ? hashApiKey(
          JSON.stringify([
            input.ownerId ?? null,
            input.plan,
            input.label ?? null,
            input.expiresAt?.toISOString() ?? null,
          ]),
        )
      : null;
    const [row] = await this.db<KeyRow>('api_keys')
      .insert({
        id,
        owner_id: input.ownerId,
        plan: input.plan,
        label: input.label ?? null,
        ...secret,
        status: 'active',
        expires_at: input.expiresAt ?? null,
        ...(input.idempotencyKey && {
          idempotency_key: input.idempotencyKey,
          request_fingerprint: fingerprint,
        }),
      })
      .onConflict('idempotency_key')
      .ignore()
      .returning('*');
    if (row) return this.present(row, key);
    return this.db.transaction(async (tx) => {
      const first = await tx('api_keys')
        .where({ idempotency_key: input.idempotencyKey })
        .forUpdate()
        .first<(KeyRow & { request_fingerprint: string | null }) | undefined>();
      if (!first)
        throw new IdempotencyConflict('The key of this Idempotency-Key was removed; use a new one.');
      if (first.request_fingerprint !== fingerprint)
        throw new IdempotencyConflict('This Idempotency-Key was used with a different request.');
      if (effectiveStatus(first) !== 'active')
        throw new IdempotencyConflict(
          `The key issued for this Idempotency-Key is ${effectiveStatus(first)}.`,
        );
      const [rotated] = await tx<KeyRow>('api_keys').where({ id: first.id }).update(secret).returning('*');
      return { ...this.present(rotated, key), replaced: first };
    });
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
  /** Replaces a key's vocabulary (null or empty: none); the row, or undefined when no such key. */
  async setVocabulary(id: string, entries: VocabularyEntry[] | null): Promise<KeyRow | undefined> {
    const value = entries && entries.length > 0 ? JSON.stringify(entries) : null;
    const [row] = await this.db<KeyRow>('api_keys')
      .where({ id })
      .update({ vocabulary: value } as never, '*');
    return row;
  }

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
