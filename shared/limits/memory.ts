import type { LeaseRequest, LimitsDriver, RateBucket, RateDecision } from './types.js';
import { RateLimiters } from './rate.js';

/** Limits for a single process: token buckets and leases held in memory. */
export class MemoryLimits implements LimitsDriver {
  readonly kind = 'memory' as const;
  private readonly rates = new RateLimiters(null, '');
  private readonly leases = new Map<string, Map<string, number>>();

  consume(bucket: RateBucket, owner: string, perMinute: number): Promise<RateDecision> {
    return this.rates.consume(bucket, owner, perMinute);
  }

  private live(scope: string, owner: string): Map<string, number> {
    const k = `${scope}:${owner}`;
    let m = this.leases.get(k);
    if (!m) this.leases.set(k, (m = new Map<string, number>()));
    const now = Date.now();
    for (const [id, exp] of m) if (exp <= now) m.delete(id);
    return m;
  }

  acquireLease(req: LeaseRequest): Promise<boolean> {
    return this.acquireLeases(req, [req.leaseId]).then((refused) => refused.length === 0);
  }

  acquireLeases(req: Omit<LeaseRequest, 'leaseId'>, leaseIds: string[]): Promise<string[]> {
    const m = this.live(req.scope, req.owner);
    const refused: string[] = [];
    for (const id of leaseIds) {
      if (!m.has(id) && m.size >= req.max) refused.push(id);
      else m.set(id, Date.now() + req.ttlMs);
    }
    return Promise.resolve(refused);
  }

  renewLease(scope: string, owner: string, leaseId: string, ttlMs: number): Promise<boolean> {
    return this.renewLeases(scope, owner, [leaseId], ttlMs).then((lost) => lost.length === 0);
  }

  /**
   * Looks at these leases alone, as the Redis driver's RENEW does: sweeping the
   * owner's other leases here made renewing all of an owner's n sessions
   * cost n² (acquire and count still sweep).
   */
  renewLeases(scope: string, owner: string, leaseIds: string[], ttlMs: number): Promise<string[]> {
    const m = this.leases.get(`${scope}:${owner}`);
    const now = Date.now();
    const lost: string[] = [];
    for (const id of leaseIds) {
      const exp = m?.get(id);
      if (!m || exp === undefined || exp <= now) {
        m?.delete(id);
        lost.push(id);
      } else m.set(id, now + ttlMs);
    }
    return Promise.resolve(lost);
  }

  releaseLease(scope: string, owner: string, leaseId: string): Promise<void> {
    const k = `${scope}:${owner}`;
    const m = this.leases.get(k);
    m?.delete(leaseId);
    if (m && m.size === 0) this.leases.delete(k);
    return Promise.resolve();
  }

  countLeases(scope: string, owner: string): Promise<number> {
    return Promise.resolve(this.live(scope, owner).size);
  }

  steadyForMs(): number {
    return Infinity;
  }

  onRecovered(): () => void {
    return () => {};
  }

  ping(): Promise<boolean> {
    return Promise.resolve(true);
  }

  close(): Promise<void> {
    this.leases.clear();
    return Promise.resolve();
  }
}
