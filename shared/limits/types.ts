/**
 * Plan limits shared by every instance of both tiers: one interface, two
 * drivers (memory for a single process, Redis for many), chosen in one
 * factory (shared/limits/index.ts).
 *
 * - Rates (requests per minute, handshakes per minute) are token buckets of
 *   rate-limiter-flexible, keyed by API key id.
 * - Concurrency (open connections, in-flight work) is held as leases: each
 *   holder renews its lease before the TTL runs out, so an instance that dies
 *   frees its slots within one TTL instead of leaking counters.
 */
export type RateBucket = 'requests' | 'polls' | 'connections';

export interface RateDecision {
  allowed: boolean;
  /** Milliseconds until a point is available again (0 when allowed). */
  retryAfterMs: number;
  remaining: number;
  limit: number;
}

export interface LeaseRequest {
  /** What the lease counts, for example `connections`. */
  scope: string;
  /** Whose slots (the API key id). */
  owner: string;
  /** Unique id of this holder (for example the session id). */
  leaseId: string;
  max: number;
  ttlMs: number;
}

export interface LimitsDriver {
  readonly kind: 'memory' | 'redis';
  /** Consume one point of a per-minute bucket sized `perMinute` for `owner`. */
  consume(bucket: RateBucket, owner: string, perMinute: number): Promise<RateDecision>;
  /** Take a slot if fewer than `max` unexpired leases exist; true when taken (or already held). */
  acquireLease(req: LeaseRequest): Promise<boolean>;
  /** As acquireLease for several leases of one owner, in order, in one store call; the ids not taken. */
  acquireLeases(req: Omit<LeaseRequest, 'leaseId'>, leaseIds: string[]): Promise<string[]>;
  /** Extend a held lease; false when it had expired and was taken by nobody (caller may re-acquire). */
  renewLease(scope: string, owner: string, leaseId: string, ttlMs: number): Promise<boolean>;
  /**
   * As renewLease for several leases of one owner in one store call (an
   * instance renews all it holds of an owner at once); the ids that had expired.
   */
  renewLeases(scope: string, owner: string, leaseIds: string[], ttlMs: number): Promise<string[]>;
  releaseLease(scope: string, owner: string, leaseId: string): Promise<void>;
  /** Unexpired leases held for `owner` in `scope`. */
  countLeases(scope: string, owner: string): Promise<number>;
  /** True when the backing store answers (always true in memory). */
  ping(): Promise<boolean>;
  /**
   * 0 while the store is failing calls, missing heartbeats or without its
   * connection; after that, milliseconds since the first call that
   * succeeded (Infinity when it never failed; always Infinity in memory).
   * Leases are only trusted once the store has been steady for the settle
   * period: every holder has then renewed (or re-taken) its own.
   */
  steadyForMs(): number;
  /** Calls `cb` when the store answers again after trouble (never, in memory); returns the unsubscribe. */
  onRecovered(cb: () => void): () => void;
  close(): Promise<void>;
}
