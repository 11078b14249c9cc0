/**
 * Per-key connection quota, shared by every realtime instance through the
 * limits driver (Redis in the scaled deployment): a handshake rate
 * (maxConnectionsPerMinute) and concurrent connections held as leases with a
 * TTL (maxConcurrentConnections). One timer renews all leases of this
 * instance; an instance that dies stops renewing and its slots free within
 * one TTL.
 */
import type { Logger } from 'pino';
import type { LimitsDriver } from '../shared/limits/index.js';
import type { PlanLimits } from '../shared/plans.js';

export const CONNECTION_SCOPE = 'realtime_connections';

export type QuotaDecision =
  { ok: true } | { ok: false; status: 429 | 503; code: string; message: string; retryAfterSeconds: number };

interface Held {
  owner: string;
  max: number;
}

export class ConnectionQuota {
  private readonly held = new Map<string, Held>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly limits: LimitsDriver,
    private readonly opts: { leaseTtlMs: number; leaseRenewMs: number },
    private readonly logger: Logger,
  ) {
    this.timer = setInterval(() => void this.renewAll(), opts.leaseRenewMs);
    this.timer.unref();
  }

  get size(): number {
    return this.held.size;
  }

  /**
   * Takes a connection slot for `leaseId`, then a handshake point. A handshake
   * refused for want of a slot spends no point: a client retrying after a crash
   * gets in as soon as its old slot frees (one lease TTL), not a minute later.
   */
  async admit(owner: string, limits: PlanLimits, leaseId: string): Promise<QuotaDecision> {
    const lease = { scope: CONNECTION_SCOPE, owner, leaseId, max: limits.maxConcurrentConnections };
    try {
      const got = await this.limits.acquireLease({ ...lease, ttlMs: this.opts.leaseTtlMs });
      if (!got) {
        return {
          ok: false,
          status: 429,
          code: 'too_many_connections',
          message: `At most ${limits.maxConcurrentConnections} concurrent connections for this key.`,
          retryAfterSeconds: Math.max(1, Math.ceil(this.opts.leaseRenewMs / 1000)),
        };
      }
      const rate = await this.limits.consume('connections', owner, limits.maxConnectionsPerMinute);
      if (!rate.allowed) {
        await this.limits.releaseLease(CONNECTION_SCOPE, owner, leaseId);
        return {
          ok: false,
          status: 429,
          code: 'connection_rate_exceeded',
          message: `At most ${limits.maxConnectionsPerMinute} connections per minute for this key.`,
          retryAfterSeconds: Math.max(1, Math.ceil(rate.retryAfterMs / 1000)),
        };
      }
    } catch (err) {
      this.logger.warn({ err }, 'limits store unavailable during realtime admission');
      await this.limits.releaseLease(CONNECTION_SCOPE, owner, leaseId).catch(() => {});
      return {
        ok: false,
        status: 503,
        code: 'limits_unavailable',
        message: 'Quota store unavailable; retry shortly.',
        retryAfterSeconds: 1,
      };
    }
    this.held.set(leaseId, { owner, max: limits.maxConcurrentConnections });
    return { ok: true };
  }

  async release(leaseId: string): Promise<void> {
    const h = this.held.get(leaseId);
    if (!h) return;
    this.held.delete(leaseId);
    try {
      await this.limits.releaseLease(CONNECTION_SCOPE, h.owner, leaseId);
    } catch (err) {
      // The lease expires by itself within one TTL.
      this.logger.warn({ err }, 'could not release a connection lease');
    }
  }

  async renewAll(): Promise<void> {
    const entries = [...this.held.entries()];
    await Promise.all(
      entries.map(async ([leaseId, h]) => {
        try {
          const ok = await this.limits.renewLease(CONNECTION_SCOPE, h.owner, leaseId, this.opts.leaseTtlMs);
          if (!ok && this.held.has(leaseId)) {
            // Expired meanwhile (store outage): take the slot back if it is still free.
            await this.limits.acquireLease({
              scope: CONNECTION_SCOPE,
              owner: h.owner,
              leaseId,
              max: h.max,
              ttlMs: this.opts.leaseTtlMs,
            });
          }
        } catch (err) {
          this.logger.debug({ err }, 'lease renewal failed');
        }
      }),
    );
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await Promise.all([...this.held.keys()].map((id) => this.release(id)));
  }
}
