/**
 * Authentication for every transcription plane (HTTP routes and the realtime
 * upgrade use this unchanged). Lookups are cached for `keyCacheTtlMs` so the
 * hot path rarely touches Postgres; the TTL bounds how long a revocation takes
 * to reach every instance. Last-used times are buffered and written in one
 * statement every `lastUsedFlushMs`, never per request.
 */
import type { Logger } from 'pino';
import type { PlanCatalog, PlanLimits } from '../plans.js';
import { type KeyRow, type KeyStatus, type KeyStore, effectiveStatus, tenantOf } from './keyStore.js';
import { hashApiKey, looksLikeApiKey } from './keys.js';
import type { VocabularyEntry } from '../stt/bias/compile.js';
import { issueSessionToken, verifySessionToken } from './sessionTokens.js';

export interface Principal {
  keyId: string;
  ownerId: string;
  plan: string;
  limits: PlanLimits;
  /** The key's stored vocabulary (issue 37), when it has one. */
  vocabulary?: VocabularyEntry[];
  /** How the caller authenticated. */
  via: 'api_key' | 'session_token';
}

export type AuthErrorCode =
  | 'missing_api_key'
  | 'invalid_api_key'
  | 'revoked_api_key'
  | 'expired_api_key'
  | 'invalid_session_token'
  | 'auth_unavailable'
  | 'token_issuer_unavailable';

export interface AuthFailure {
  ok: false;
  status: 401 | 503;
  code: AuthErrorCode;
  message: string;
}

export type AuthResult = { ok: true; principal: Principal } | AuthFailure;

export const AUTH_MESSAGES: Record<AuthErrorCode, string> = {
  missing_api_key: 'No API key provided. Send "Authorization: Bearer sk-...".',
  invalid_api_key: 'The API key is malformed or unknown.',
  revoked_api_key: 'The API key has been revoked.',
  expired_api_key: 'The API key has expired.',
  invalid_session_token: 'The session token is invalid or expired.',
  auth_unavailable: 'The key store is unavailable; try again shortly.',
  token_issuer_unavailable: 'Session tokens are not available: the signing secret is not configured.',
};

export function authFailure(code: AuthErrorCode): AuthFailure {
  const status = code === 'auth_unavailable' || code === 'token_issuer_unavailable' ? 503 : 401;
  return { ok: false, status, code, message: AUTH_MESSAGES[code] };
}

export interface AuthenticatorOptions {
  keyCacheTtlMs: number;
  lastUsedFlushMs: number;
  sessionTokenSecret?: string;
  sessionTokenTtlSeconds: number;
  maxCacheEntries?: number;
}

interface CacheEntry {
  row: KeyRow | null;
  at: number;
}

/** Cached lookups and the lookups in flight, by hash or by id. */
interface Cache {
  entries: Map<string, CacheEntry>;
  /** So a key whose entry just went stale costs one query, not one per request waiting for it. */
  loading: Map<string, Promise<KeyRow | null>>;
}

const newCache = (): Cache => ({ entries: new Map(), loading: new Map() });

export class Authenticator {
  private readonly byHash = newCache();
  private readonly byId = newCache();
  /** Bumped by `invalidate`: a lookup that started before it must not repopulate the cache. */
  private generation = 0;
  /** Key id -> last use (ms since epoch), written to Postgres every `lastUsedFlushMs`. */
  private readonly lastUsed = new Map<string, number>();
  private readonly flushTimer: NodeJS.Timeout;
  private readonly maxEntries: number;

  constructor(
    private readonly store: KeyStore,
    private readonly plans: PlanCatalog,
    private readonly opts: AuthenticatorOptions,
    private readonly logger?: Logger,
  ) {
    this.maxEntries = opts.maxCacheEntries ?? 50_000;
    this.flushTimer = setInterval(() => void this.flushLastUsed(), opts.lastUsedFlushMs);
    this.flushTimer.unref();
  }

  /** The current status of these keys, from the store itself (not the cache): open sessions' re-check. */
  statuses(ids: string[]): Promise<Map<string, KeyStatus>> {
    return this.store.statuses(ids);
  }

  get sessionTokensEnabled(): boolean {
    return Boolean(this.opts.sessionTokenSecret);
  }

  /** Parses an Authorization header value: only the Bearer scheme is accepted. */
  static bearer(header: string | undefined): { token?: string; failure?: AuthFailure } {
    // No header, an empty one, or the Bearer scheme with nothing after it: no key was given.
    if (header === undefined || /^\s*(Bearer\s*)?$/i.test(header))
      return { failure: authFailure('missing_api_key') };
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (m) return { token: m[1] };
    // An RFC 7235 token before the credentials: the scheme.
    const scheme = /^\s*([A-Za-z0-9!#$%&'*+.^_`|~-]{1,20})\s+\S/.exec(header)?.[1];
    if (!scheme || /^Bearer$/i.test(scheme)) return { failure: authFailure('invalid_api_key') };
    // `Basic sk-...`, `Token sk-...`: the key may be right, the scheme is not (the scheme is not a secret).
    const message = `The Authorization header must use the Bearer scheme ("Authorization: Bearer sk-..."), not ${scheme}.`;
    return { failure: { ...authFailure('invalid_api_key'), message } };
  }

  /**
   * A lookup cached less than `keyCacheTtlMs` ago (almost every request of a
   * busy key) is answered from memory; otherwise the key store is asked.
   */
  async authenticateApiKey(key: string): Promise<AuthResult> {
    if (!looksLikeApiKey(key)) return authFailure('invalid_api_key');
    const hash = hashApiKey(key);
    const hit = this.fresh(this.byHash, hash, this.findByHash);
    return hit ? this.principalFor(hit.row, 'api_key') : this.loadApiKey(hash);
  }

  private async loadApiKey(hash: string): Promise<AuthResult> {
    let row: KeyRow | null;
    try {
      row = await this.cached(this.byHash, hash, this.findByHash);
    } catch (err) {
      this.logger?.warn({ err }, 'key store unavailable during authentication');
      return authFailure('auth_unavailable');
    }
    return this.principalFor(row, 'api_key');
  }

  async authenticateSessionToken(token: string): Promise<AuthResult> {
    const secret = this.opts.sessionTokenSecret;
    if (!secret) return authFailure('invalid_session_token');
    const claims = verifySessionToken(secret, token);
    if (!claims) return authFailure('invalid_session_token');
    let row: KeyRow | null;
    try {
      row = await this.cached(this.byId, claims.kid, this.findById);
    } catch (err) {
      this.logger?.warn({ err }, 'key store unavailable during token verification');
      return authFailure('auth_unavailable');
    }
    if (!row) return authFailure('invalid_session_token');
    return this.principalFor(row, 'session_token');
  }

  /** Authenticates either credential: an `sk-` key or an `rt_` session token. */
  async authenticate(credential: string): Promise<AuthResult> {
    return credential.startsWith('rt_')
      ? this.authenticateSessionToken(credential)
      : this.authenticateApiKey(credential);
  }

  issueSessionToken(principal: Principal): { token: string; expires_in: number } | AuthFailure {
    const secret = this.opts.sessionTokenSecret;
    if (!secret) return authFailure('token_issuer_unavailable');
    const { token } = issueSessionToken(secret, principal.keyId, this.opts.sessionTokenTtlSeconds);
    return { token, expires_in: this.opts.sessionTokenTtlSeconds };
  }

  /** Forget a key at once on this instance (others follow within the cache TTL). */
  invalidate(row: Pick<KeyRow, 'id' | 'key_hash'>): void {
    this.generation++;
    for (const [cache, k] of [
      [this.byHash, row.key_hash],
      [this.byId, row.id],
    ] as const) {
      cache.entries.delete(k);
      cache.loading.delete(k); // a lookup already running may predate the revocation
    }
  }

  async close(): Promise<void> {
    clearInterval(this.flushTimer);
    await this.flushLastUsed();
  }

  async flushLastUsed(): Promise<void> {
    if (this.lastUsed.size === 0) return;
    const batch = new Map(this.lastUsed);
    this.lastUsed.clear();
    try {
      await this.store.touch(new Map([...batch].map(([id, t]) => [id, new Date(t)])));
    } catch (err) {
      // Keep the newest time for the next flush; losing it would only make lastUsedAt stale.
      for (const [id, t] of batch) if (!this.lastUsed.has(id)) this.lastUsed.set(id, t);
      this.logger?.warn({ err }, 'could not write last-used times');
    }
  }

  private principalFor(row: KeyRow | null, via: Principal['via']): AuthResult {
    if (!row) return authFailure('invalid_api_key');
    const status = effectiveStatus(row);
    if (status === 'revoked') return authFailure('revoked_api_key');
    if (status === 'expired') return authFailure('expired_api_key');
    this.lastUsed.set(row.id, Date.now());
    const plan = this.plans.has(row.plan) ? row.plan : 'free';
    return {
      ok: true,
      principal: {
        keyId: row.id,
        ownerId: tenantOf(row),
        plan,
        limits: this.plans.limits(plan),
        ...(row.vocabulary?.length ? { vocabulary: row.vocabulary } : {}),
        via,
      },
    };
  }

  private readonly findByHash = async (hash: string) => (await this.store.findByHash(hash)) ?? null;
  private readonly findById = async (id: string) => (await this.store.get(id)) ?? null;

  private async cached(
    cache: Cache,
    k: string,
    load: (k: string) => Promise<KeyRow | null>,
  ): Promise<KeyRow | null> {
    const hit = this.fresh(cache, k, load);
    return hit ? hit.row : this.lookUp(cache, k, load);
  }

  /**
   * The entry if it is younger than the TTL. A hot key's entry is looked up
   * again in the background once it is 80% of the TTL old, so its requests
   * do not all wait for the query when it expires; an entry is still never
   * used past the TTL, which is what bounds how long a revocation takes.
   */
  private fresh(
    cache: Cache,
    k: string,
    load: (k: string) => Promise<KeyRow | null>,
  ): CacheEntry | undefined {
    const hit = cache.entries.get(k);
    if (!hit) return undefined;
    const age = Date.now() - hit.at;
    if (age >= this.opts.keyCacheTtlMs) return undefined;
    if (age >= this.opts.keyCacheTtlMs * 0.8 && !cache.loading.has(k)) {
      this.lookUp(cache, k, load).catch((err: unknown) =>
        this.logger?.debug({ err }, 'background key lookup failed'),
      );
    }
    return hit;
  }

  /** One query per key at a time; its row replaces the cache entry unless a revocation came in meanwhile. */
  private lookUp(
    cache: Cache,
    k: string,
    load: (k: string) => Promise<KeyRow | null>,
  ): Promise<KeyRow | null> {
    const pending = cache.loading.get(k);
    if (pending) return pending;
    // The entry's age counts from when the query started: a revocation committed after that is seen at the next lookup.
    const started = Date.now();
    const generation = this.generation;
    const p: Promise<KeyRow | null> = load(k).then(
      (row) => {
        if (cache.loading.get(k) === p) {
          cache.loading.delete(k);
          if (generation === this.generation) {
            const { entries } = cache;
            if (entries.size >= this.maxEntries) entries.delete(entries.keys().next().value as string);
            entries.delete(k);
            entries.set(k, { row, at: started });
          }
        }
        return row;
      },
      (err: unknown) => {
        if (cache.loading.get(k) === p) cache.loading.delete(k);
        throw err;
      },
    );
    cache.loading.set(k, p);
    return p;
  }
}
