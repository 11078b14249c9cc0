/**
 * The realtime tier's connection leases cost Redis a call per owner and
 * renewal interval, not one per session (issue 40): a realtime instance with
 * 10,000 idle sessions of one key used to send 2,000 EVALs a second. Counted
 * on a redis-server of the test's own (INFO commandstats), through the real
 * quota (realtime/quota.ts) and Redis driver. A lease still lapses within its
 * TTL when its holder stops renewing, and leases lost in a Redis restart are
 * taken back by the next renewal.
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { ConnectionQuota, CONNECTION_SCOPE } from '../../realtime/quota.js';
import { RedisLimits } from '../../shared/limits/redis.js';
import { BUILTIN_PLANS, type PlanLimits } from '../../shared/plans.js';
import { createLogger } from '../../shared/logger.js';
import { OwnRedis, waitFor } from '../faults/cluster.js';

const TTL_MS = 3000;
const RENEW_MS = 1000;
const PLAN: PlanLimits = {
  ...BUILTIN_PLANS.free,
  maxConcurrentConnections: 100_000,
  maxConnectionsPerMinute: 1_000_000,
};

/** Calls of each command since the last CONFIG RESETSTAT, from INFO commandstats. */
async function commandCalls(admin: Redis): Promise<Map<string, number>> {
  const info = await admin.info('commandstats');
  const calls = new Map<string, number>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1], Number(m[2]));
  return calls;
}

/** Script calls (EVAL and EVALSHA): what a lease acquire or renewal sends. */
const scriptCalls = (calls: Map<string, number>) => (calls.get('eval') ?? 0) + (calls.get('evalsha') ?? 0);

describe('realtime connection leases: upkeep per owner, not per session', function () {
  this.timeout(60_000);
  let redis: OwnRedis;
  let admin: Redis;
  const drivers: RedisLimits[] = [];
  const quotas: ConnectionQuota[] = [];
  const logger = createLogger({ level: 'silent' });

  before(async () => {
    redis = await OwnRedis.start();
    admin = new Redis(redis.url);
  });
  afterEach(async () => {
    for (const q of quotas.splice(0)) await q.close().catch(() => {});
    for (const d of drivers.splice(0)) await d.close();
    await admin.flushall();
  });
  after(async () => {
    admin?.disconnect();
    await redis?.stop();
  });

  const instance = () => {
    const limits = RedisLimits.connect(redis.url);
    const quota = new ConnectionQuota(limits, { leaseTtlMs: TTL_MS, leaseRenewMs: RENEW_MS }, logger);
    drivers.push(limits);
    quotas.push(quota);
    return { limits, quota };
  };

  /** Opens `n` sessions of each owner on `quota`. */
  const admitAll = async (quota: ConnectionQuota, owners: string[], n: number) => {
    for (const owner of owners) {
      const decisions = await Promise.all(
        Array.from({ length: n }, (_, i) => quota.admit(owner, PLAN, `${owner}-s${i}`)),
      );
      expect(decisions.filter((d) => !d.ok)).to.deep.equal([]);
    }
  };

  /** Script calls Redis answered while the instance held its sessions for `intervals` renewal intervals. */
  const scriptCallsOver = async (intervals: number) => {
    await admin.config('RESETSTAT');
    await new Promise((r) => setTimeout(r, intervals * RENEW_MS + RENEW_MS / 2));
    return scriptCalls(await commandCalls(admin));
  };

  it('renews 2 owners × 400 sessions with about 2 script calls per interval, as many as 2 owners × 4 sessions', async () => {
    const intervals = 4;
    const few = instance();
    await admitAll(few.quota, ['owner-a', 'owner-b'], 4);
    const withFew = await scriptCallsOver(intervals);
    await few.quota.close();

    const many = instance();
    await admitAll(many.quota, ['owner-a', 'owner-b'], 400);
    const withMany = await scriptCallsOver(intervals);

    // Per-session renewal would make 2 × 400 calls per interval (3,200 here).
    const bound = 2 * (intervals + 1);
    expect(withFew, 'script calls with 8 sessions').to.be.within(1, bound);
    expect(withMany, 'script calls with 800 sessions').to.be.within(1, bound);
    // Renewed, not lapsed: more than a TTL has passed since the last admission.
    expect(await many.limits.countLeases(CONNECTION_SCOPE, 'owner-a')).to.equal(400);
    expect(await many.limits.countLeases(CONNECTION_SCOPE, 'owner-b')).to.equal(400);
  });

  it('lets the leases of an instance that stops renewing lapse within one TTL', async () => {
    const dying = instance();
    await admitAll(dying.quota, ['owner-a'], 50);
    const watcher = instance();
    expect(await watcher.limits.countLeases(CONNECTION_SCOPE, 'owner-a')).to.equal(50);
    // The holder's connection to Redis is gone (as when its process dies): nothing renews.
    const since = Date.now();
    dying.limits.redis.disconnect();
    await waitFor(
      'the dead holder’s leases lapsed',
      async () => (await watcher.limits.countLeases(CONNECTION_SCOPE, 'owner-a')) === 0,
      TTL_MS + 3000,
      100,
    );
    expect(Date.now() - since).to.be.at.most(TTL_MS + 1000);
  });

  it('takes back, in one call per owner, the leases a Redis restart lost', async () => {
    const { limits, quota } = instance();
    const lost: string[] = [];
    quota.onLost = (id) => lost.push(id);
    await admitAll(quota, ['owner-a', 'owner-b'], 100);
    await admin.flushall(); // what a restarted Redis without persistence holds
    await admin.config('RESETSTAT');
    await quota.renewAll();
    // One renewal (all lost) and one acquire per owner.
    expect(scriptCalls(await commandCalls(admin))).to.equal(4);
    expect(await limits.countLeases(CONNECTION_SCOPE, 'owner-a')).to.equal(100);
    expect(await limits.countLeases(CONNECTION_SCOPE, 'owner-b')).to.equal(100);
    expect(lost).to.deep.equal([]);
  });

  it('ends the sessions whose slots another holder took meanwhile, and only those', async () => {
    const small: PlanLimits = { ...PLAN, maxConcurrentConnections: 3 };
    const { quota } = instance();
    const lost: string[] = [];
    quota.onLost = (id) => lost.push(id);
    for (const id of ['s1', 's2', 's3']) expect((await quota.admit('owner-c', small, id)).ok).to.equal(true);
    await admin.flushall();
    // Another instance takes two of the three slots while this one's leases are gone.
    const other = instance();
    for (const id of ['o1', 'o2']) expect((await other.quota.admit('owner-c', small, id)).ok).to.equal(true);
    await quota.renewAll();
    expect(lost).to.have.length(2);
    expect(quota.size).to.equal(1);
    expect(await other.limits.countLeases(CONNECTION_SCOPE, 'owner-c')).to.equal(3);
  });
});
