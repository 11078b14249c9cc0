/**
 * Per-key connection quota, shared by every realtime instance through the
 * limits driver (Redis in the scaled deployment): a handshake rate
 * (maxConnectionsPerMinute) and concurrent connections held as leases with a
 * TTL (maxConcurrentConnections). One timer renews all leases of this
 * instance, one store call per owner (key) whatever its number of sessions;
 * an instance that dies stops renewing and its slots free within one TTL.
 *
 * A lease store that blips (Redis frozen, stopped, restarted) cannot be
 * trusted until every holder has renewed since: leases it let expire meanwhile
 * (or lost in a restart) would otherwise be handed to newcomers while their
 * sessions are still open. So admission is refused (503 `limits_unavailable`,
 * Retry-After) until this instance has seen the store answer again and a
 * settle period (LEASE_SETTLE_MS) has passed, by which time every instance
 * has seen it too and re-taken its sessions' slots: each renews all its
 * leases the moment the store answers again. Open sessions carry on through
 * the blip. Should a renewal still find its slot taken (an instance stalled
 * past that period), the session is ended (`onLost`) rather than run over
 * the limit.
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

/**
 * How long after this instance sees the store answer again (the first call
 * that succeeds after trouble) the lease store is still not trusted. Every
 * instance sees it within REDIS_RECONNECT_MAX_MS of the others (a frozen or
 * paused Redis answers every instance's pending calls at once; a restarted
 * one is reconnected to within that and pinged on `ready`), then renews or
 * re-takes its leases in two round trips: this covers that and a margin for
 * a busy event loop. Through the load balancer, new sessions are admitted
 * again 1.1–1.5 s after Redis returns from a 20 s freeze, pause or restart
 * (test/faults/redis-blip.test.ts).
 */
export const LEASE_SETTLE_MS = 1000;

export class ConnectionQuota {
  private readonly held = new Map<string, Held>();
  private readonly timer: NodeJS.Timeout;
  private readonly unsubscribe: () => void;

  /** Called when a held slot turned out to be taken by another holder: the session must end. */
  onLost: (leaseId: string) => void = () => {};

  constructor(
    private readonly limits: LimitsDriver,
    private readonly opts: { leaseTtlMs: number; leaseRenewMs: number },
    private readonly logger: Logger,
  ) {
    this.timer = setInterval(() => void this.renewAll(), opts.leaseRenewMs);
    this.timer.unref();
    // Back from a blip: re-take this instance's slots before the settle period lets newcomers in.
    this.unsubscribe = limits.onRecovered(() => void this.renewAll());
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
    const unsettled = LEASE_SETTLE_MS - this.limits.steadyForMs();
    if (unsettled > 0) return unavailable(unsettled);
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
      // Not awaited: the store may be frozen. A lease the acquire took anyway expires within one TTL.
      void this.limits.releaseLease(CONNECTION_SCOPE, owner, leaseId).catch(() => {});
      return unavailable(LEASE_SETTLE_MS);
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

  /**
   * Renews every lease this instance holds, one store call per owner (not per
   * session); leases that expired meanwhile (store outage, restart) are taken
   * back in one more call per owner, and admission waits for this.
   */
  async renewAll(): Promise<void> {
    const byOwner = new Map<string, { max: number; ids: string[] }>();
    for (const [leaseId, h] of this.held) {
      const o = byOwner.get(h.owner);
      if (o) o.ids.push(leaseId);
      else byOwner.set(h.owner, { max: h.max, ids: [leaseId] });
    }
    const { leaseTtlMs: ttlMs } = this.opts;
    await Promise.all(
      [...byOwner].map(async ([owner, { max, ids }]) => {
        try {
          const lost = await this.limits.renewLeases(CONNECTION_SCOPE, owner, ids, ttlMs);
          const stillHeld = lost.filter((id) => this.held.has(id));
          if (stillHeld.length === 0) return;
          const refused = await this.limits.acquireLeases(
            { scope: CONNECTION_SCOPE, owner, max, ttlMs },
            stillHeld,
          );
          for (const leaseId of refused) {
            if (!this.held.has(leaseId)) continue;
            this.logger.warn({ owner }, 'connection slot taken by another holder; ending the session');
            this.held.delete(leaseId);
            this.onLost(leaseId);
          }
        } catch (err) {
          this.logger.debug({ err }, 'lease renewal failed');
        }
      }),
    );
  }

  async close(): Promise<void> {
    this.onLost = () => {};
    this.unsubscribe();
    clearInterval(this.timer);
    await Promise.all([...this.held.keys()].map((id) => this.release(id)));
  }
}

/** The refusal while the lease store cannot be trusted. */
function unavailable(forMs: number): QuotaDecision {
  return {
    ok: false,
    status: 503,
    code: 'limits_unavailable',
    message: 'Quota store unavailable; retry shortly.',
    retryAfterSeconds: Math.max(1, Math.ceil(forMs / 1000)),
  };
}
